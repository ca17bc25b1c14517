"""Leaks MB mebibytes per request (and says how much it holds)."""

import numpy as np

import triton_python_backend_utils as pb_utils

MIB = 1024 * 1024


class TritonPythonModel:
    def initialize(self, args):
        self.leaked = []

    def execute(self, requests):
        responses = []
        for request in requests:
            mb = int(pb_utils.get_input_tensor_by_name(request, "MB").as_numpy()[0])
            self.leaked.append(b"\x01" * (mb * MIB))
            held = sum(len(b) for b in self.leaked) // MIB
            out = pb_utils.Tensor("HELD_MB", np.array([held], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
