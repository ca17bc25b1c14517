"""Reschedules each request until it ran N times, then answers with what every run saw."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}  # correlation ID -> what each run of its request saw

    def execute(self, requests):
        responses = []
        for request in requests:
            wanted = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().flat[0])
            key = request.correlation_id()
            runs = self.runs.setdefault(key, [])
            runs.append([request.request_id(), key, request.flags(), len(requests)])
            if len(runs) < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            del self.runs[key]
            log = np.array([[json.dumps(runs)]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LOG", log)]))
        return responses
