"""Y = 2 * X for every request; the call sleeps EXECUTE_MS once, however many requests."""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.execute_s = float(params["EXECUTE_MS"]["string_value"]) / 1000.0

    def execute(self, requests):
        time.sleep(self.execute_s)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return responses
