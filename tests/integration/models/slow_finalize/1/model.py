"""finalize() does what the last request asked: MODE 0 = return, 1 = hang, 2 = raise."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mode = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()
            self.mode = int(mode[0])
            echo = pb_utils.Tensor("MODE", mode.copy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[echo]))
        return responses

    def finalize(self):
        if self.mode == 1:
            time.sleep(3600)
        if self.mode == 2:
            raise RuntimeError("finalize exploded")
