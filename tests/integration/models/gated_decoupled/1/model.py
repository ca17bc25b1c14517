"""Decoupled: one response per element of IN, then the final flag alone. initialize() waits
while "hold_initialize" exists in the model directory (bounded, so nothing hangs)."""

import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils

LONGEST_WAIT_S = 300.0


class TritonPythonModel:
    def initialize(self, args):
        hold = os.path.join(args["model_repository"], "hold_initialize")
        deadline = time.monotonic() + LONGEST_WAIT_S
        while os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.02)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for value in pb_utils.get_input_tensor_by_name(request, "IN").as_numpy():
                out = pb_utils.Tensor("OUT", np.array([value], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
