"""Y = X * factor, once the other branch of the same request has started too.

Each branch marks that it runs (a file named after the model, in the directory the request's
"marks" parameter names: the ensemble passes its request's parameters to its steps) and
waits for the other one's mark: run one after the other, the first would give up and fail.
So the fan-out test proves the two steps run at the same time without timing anything.
"""

import json
import os
import time

import triton_python_backend_utils as pb_utils

GIVE_UP_S = 30.0


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = config["name"]
        self.factor = float(config["parameters"]["factor"]["string_value"])
        self.other = "branch_b" if self.name == "branch_a" else "branch_a"

    def execute(self, requests):
        responses = []
        for request in requests:
            marks = json.loads(request.parameters()).get("marks")
            if marks:
                open(os.path.join(marks, self.name), "w").close()
                other = os.path.join(marks, self.other)
                deadline = time.monotonic() + GIVE_UP_S
                while not os.path.exists(other):
                    if time.monotonic() > deadline:
                        raise pb_utils.TritonModelException(f"{self.other} never started")
                    time.sleep(0.01)
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * self.factor)]))
        return responses
