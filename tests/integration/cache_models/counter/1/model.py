"""Y = X + executions so far (this one included); Z = the request parameter "k" (0 if none)."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.executions += 1
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            k = float(json.loads(request.parameters() or "{}").get("k", 0))
            y = (x + self.executions).astype(np.float32)
            z = np.full(x.shape, k, np.float32)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", y), pb_utils.Tensor("Z", z)])
            )
        return responses
