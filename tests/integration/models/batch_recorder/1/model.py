"""Echoes X, and tells each request how the execute() call that ran it was batched."""

import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils

LONGEST_WAIT_S = 300.0


def wait_while(path):
    deadline = time.monotonic() + LONGEST_WAIT_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        rows = sum(x.shape[0] for x in xs)
        for request in requests:
            gate = pb_utils.get_input_tensor_by_name(request, "GATE")
            if gate is not None:
                path = gate.as_numpy()[0][0].decode("utf-8")
                with open(path + ".executing", "w") as f:
                    f.write("executing\n")
                wait_while(path)
        responses = []
        for position, x in enumerate(xs):

            def column(value, n=x.shape[0]):
                return np.full((n, 1), value, dtype=np.int32)

            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("Y", x),
                        pb_utils.Tensor("REQUESTS", column(len(requests))),
                        pb_utils.Tensor("ROWS", column(rows)),
                        pb_utils.Tensor("POSITION", column(position)),
                        pb_utils.Tensor("EXECUTION", column(self.executions)),
                    ]
                )
            )
        self.executions += 1
        return responses
