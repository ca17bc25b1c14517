"""Recursive BLS: the model calls itself DEPTH times; REACHED counts the levels."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            depth = int(pb_utils.get_input_tensor_by_name(request, "DEPTH").as_numpy()[0])
            if depth <= 0:
                reached = np.array([0], dtype=np.int32)
            else:
                inner = pb_utils.InferenceRequest(
                    model_name="bls_self",
                    inputs=[pb_utils.Tensor("DEPTH", np.array([depth - 1], dtype=np.int32))],
                    requested_output_names=["REACHED"],
                ).exec()
                if inner.has_error():
                    responses.append(pb_utils.InferenceResponse(error=inner.error()))
                    continue
                reached = pb_utils.get_output_tensor_by_name(inner, "REACHED").as_numpy() + 1
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("REACHED", reached)])
            )
        return responses
