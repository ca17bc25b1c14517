"""Returns the `args` dict initialize() received (as JSON) and pb_utils.get_model_dir()."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args_json = json.dumps(dict(args)).encode("utf-8")
        self.model_dir = pb_utils.get_model_dir().encode("utf-8")

    def execute(self, requests):
        responses = []
        for _ in requests:
            args = pb_utils.Tensor("ARGS", np.array([self.args_json], dtype=np.object_))
            model_dir = pb_utils.Tensor("MODEL_DIR", np.array([self.model_dir], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse(output_tensors=[args, model_dir]))
        return responses
