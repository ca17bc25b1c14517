"""Version 2 of a three-version model; only the latest two are served."""

import numpy as np

import triton_python_backend_utils as pb_utils

VERSION = 2


class TritonPythonModel:
    def execute(self, requests):
        version = pb_utils.Tensor("VERSION", np.array([VERSION], dtype=np.int32))
        return [pb_utils.InferenceResponse(output_tensors=[version]) for _ in requests]
