"""initialize() does not return while the file "hold_initialize" exists in the model
directory (bounded at an hour): a model whose load hangs, as a test needs one. When that file
says "ignore SIGTERM", initialize() ignores SIGTERM too, as a model hung in native code does."""

import contextlib
import os
import signal
import time

import triton_python_backend_utils as pb_utils

HOLD_S = 3600.0


class TritonPythonModel:
    def initialize(self, args):
        hold = os.path.join(args["model_repository"], "hold_initialize")
        with contextlib.suppress(OSError), open(hold) as f:
            if f.read().strip() == "ignore SIGTERM":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
        deadline = time.monotonic() + HOLD_S
        while os.path.exists(hold) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
