"""A response per execution; rescheduled until the N-th, which is final."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}  # correlation ID -> executions so far

    def execute(self, requests):
        for request in requests:
            wanted = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            key = request.correlation_id()
            self.runs[key] = run = self.runs.get(key, 0) + 1
            seen = [request.request_id(), key, request.flags()]
            log = np.array([json.dumps(seen)], dtype=np.object_)
            response = pb_utils.InferenceResponse([pb_utils.Tensor("LOG", log)])
            sender = request.get_response_sender()
            if run < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
            else:
                del self.runs[key]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
