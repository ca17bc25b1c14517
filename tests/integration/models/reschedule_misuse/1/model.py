"""Asks for every request back; returns None for it, or (parameter "respond") a response."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if json.loads(request.parameters()).get("respond"):
                log = np.array(["answered"], dtype=np.object_)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LOG", log)]))
            else:
                responses.append(None)
        return responses
