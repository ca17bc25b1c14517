"""Runs in its own environment: reports the version of `packaging` it imports (the test's
environment pins one the daemon does not have) and the interpreter's sys.prefix."""

import sys

import numpy as np
import packaging

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        version = np.array([packaging.__version__.encode()], dtype=np.object_)
        prefix = np.array([sys.prefix.encode()], dtype=np.object_)
        outputs = [pb_utils.Tensor("VERSION", version), pb_utils.Tensor("PREFIX", prefix)]
        return [pb_utils.InferenceResponse(output_tensors=outputs) for _ in requests]
