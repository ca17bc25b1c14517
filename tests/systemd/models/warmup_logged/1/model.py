"""Echoes INPUT0, and logs each initialize() and each warmup execution (INPUT0 == 0) so a test
can count them in the journal. A warmup execution waits while the file "hold_warmup" exists in
the model directory (bounded at two minutes): a test holds the warmup where it wants it."""

import os
import time

import triton_python_backend_utils as pb_utils

HOLD_S = 120.0


class TritonPythonModel:
    def initialize(self, args):
        self.hold = os.path.join(args["model_repository"], "hold_warmup")
        pb_utils.Logger.log_info(f"warmup_logged: initialize() ran in pid {os.getpid()}")

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if not x.any():
                pb_utils.Logger.log_info(f"warmup_logged: warmup execution in pid {os.getpid()}")
                deadline = time.monotonic() + HOLD_S
                while os.path.exists(self.hold) and time.monotonic() < deadline:
                    time.sleep(0.05)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
