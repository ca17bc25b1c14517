"""A Python-based backend of the tests: a model whose config says ``backend: "scale"`` runs this
file (``<--backend-directory>/scale/model.py``). It multiplies INPUT by the factor in the
model's ``<version>/model.json``, as the vLLM backend reads its engine arguments from that file,
and returns as ARGS what initialize() got and where this module was imported from."""

import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        if not config["input"]:
            auto_complete_model_config.add_input(
                {"name": "INPUT", "data_type": "TYPE_FP32", "dims": [-1]}
            )
        if not config["output"]:
            auto_complete_model_config.add_output(
                {"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [-1]}
            )
            auto_complete_model_config.add_output(
                {"name": "ARGS", "data_type": "TYPE_STRING", "dims": [1]}
            )
        return auto_complete_model_config

    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(path, encoding="utf-8") as file:
            self.factor = json.load(file)["factor"]
        seen = {"args": dict(args), "module": __name__, "file": __file__}
        self.seen = json.dumps(seen).encode("utf-8")

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = pb_utils.Tensor("OUTPUT", (x * self.factor).astype(np.float32))
            seen = pb_utils.Tensor("ARGS", np.array([self.seen], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out, seen]))
        return responses
