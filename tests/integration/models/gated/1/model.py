"""Echoes ID; holds the request while the GATE file exists (bounded, so nothing hangs)."""

import os
import time

import triton_python_backend_utils as pb_utils

LONGEST_WAIT_S = 300.0


def wait_while(path):
    deadline = time.monotonic() + LONGEST_WAIT_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


class TritonPythonModel:
    def initialize(self, args):
        wait_while(os.path.join(args["model_repository"], "hold_initialize"))

    def execute(self, requests):
        responses = []
        for request in requests:
            gate = pb_utils.get_input_tensor_by_name(request, "GATE")
            if gate is not None:
                path = gate.as_numpy()[0].decode("utf-8")
                with open(path + ".executing", "w") as f:
                    f.write("executing\n")
                wait_while(path)
            ident = pb_utils.get_input_tensor_by_name(request, "ID")
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("ID", ident.as_numpy())])
            )
        return responses
