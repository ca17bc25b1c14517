"""Waits for cancellation (or release) and leaves files saying what happened."""

import os
import time

import triton_python_backend_utils as pb_utils

LONGEST_WAIT_S = 120.0


def touch(path):
    with open(path, "w") as f:
        f.write("yes\n")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ident = pb_utils.get_input_tensor_by_name(request, "ID").as_numpy()
            where = pb_utils.get_input_tensor_by_name(request, "DIR").as_numpy()[0].decode()
            n = int(ident[0])
            with open(os.path.join(where, "executed"), "a") as f:
                f.write(f"{n}\n")
            touch(os.path.join(where, f"executing-{n}"))
            deadline = time.monotonic() + LONGEST_WAIT_S
            while time.monotonic() < deadline:
                if request.is_cancelled():
                    touch(os.path.join(where, f"cancelled-{n}"))
                    break
                if os.path.exists(os.path.join(where, f"release-{n}")):
                    break
                time.sleep(0.01)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("ID", ident.copy())])
            )
        return responses
