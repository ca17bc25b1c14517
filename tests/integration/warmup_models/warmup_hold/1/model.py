"""Echoes X as Y. The warmup sample (X == 0) writes ``warmup-started.<pid>`` in the model's
directory, waits while the file ``hold`` lies there (two minutes at most), then writes
``warmup-ended.<pid>``: a test holds a warmup open for as long as it looks."""

import os
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils

HOLD_LIMIT_S = 120.0


class TritonPythonModel:
    def initialize(self, args):
        self.directory = Path(args["model_repository"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if not x.any():
                self._warm_up()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses

    def _warm_up(self):
        pid = os.getpid()
        (self.directory / f"warmup-started.{pid}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while (self.directory / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (self.directory / f"warmup-ended.{pid}").touch()
