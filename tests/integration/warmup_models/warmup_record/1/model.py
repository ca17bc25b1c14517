"""Records every execute() it runs (the requests, and each input's type, shape and first
values) and answers with that record as LOG, so a test sees what model_warmup ran before the
instance took its first request. Parameter "mode": "raise" fails every execute(), "error"
answers each request with an error; a decoupled config answers through the response sender."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _seen(tensor):
    """[dtype, shape, values] of an input (the first four values of a numeric one)."""
    array = tensor.as_numpy()
    if array.dtype == np.object_:
        values = [v.decode("utf-8", "replace") for v in array.flatten()]
    else:
        values = array.flatten().tolist()[:4]
    return [str(array.dtype), list(array.shape), values]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.mode = config["parameters"].get("mode", {}).get("string_value", "")
        self.decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)
        self.log = []

    def execute(self, requests):
        self.log.append([{t.name(): _seen(t) for t in r.inputs()} for r in requests])
        if self.mode == "raise":
            raise pb_utils.TritonModelException("warmup exploded")
        responses = []
        for _ in requests:
            if self.mode == "error":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("no")))
                continue
            record = np.array([json.dumps(self.log).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LOG", record)]))
        if not self.decoupled:
            return responses
        for request, response in zip(requests, responses, strict=True):
            sender = request.get_response_sender()
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
