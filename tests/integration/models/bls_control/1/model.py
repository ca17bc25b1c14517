"""Model control from a model; a refused operation becomes the response's error."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            model = params["model"]
            try:
                if params["op"] == "load":
                    pb_utils.load_model(model_name=model, config=params.get("config", ""))
                elif params["op"] == "unload":
                    pb_utils.unload_model(model)
                ready = pb_utils.is_model_ready(model)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            out = pb_utils.Tensor("READY", np.array([ready], dtype=bool))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
