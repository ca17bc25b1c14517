"""Running sum per sequence, kept in this instance's memory."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.correlation_id()
            flags = request.flags()
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0])
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.sums[key] = 0
            self.sums[key] = self.sums.get(key, 0) + value
            total = self.sums[key]
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.sums[key]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                        pb_utils.Tensor("INSTANCE", np.array([self.instance], dtype=np.object_)),
                        pb_utils.Tensor("CORRID", np.array([str(key)], dtype=np.object_)),
                        pb_utils.Tensor("FLAGS", np.array([flags], dtype=np.int32)),
                    ]
                )
            )
        return responses
