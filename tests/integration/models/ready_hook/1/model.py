"""is_ready() answers what the last request asked for: READY 1 = ready, 0 = not ready,
-1 = is_ready() raises. It counts its calls in the OUTPUT so tests can see the cache work."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mode = 1
        self.calls = 0

    def is_ready(self):
        self.calls += 1
        if self.mode < 0:
            raise RuntimeError("readiness check exploded")
        return self.mode == 1

    def execute(self, requests):
        responses = []
        for request in requests:
            self.mode = int(pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()[0])
            calls = pb_utils.Tensor("READY", np.array([self.calls], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[calls]))
        return responses
