"""Streams COUNT responses of FLOATS floats as fast as it can, until cancelled; then records
how many it sent in "<DIR>/sent-<ID>" ("<n> cancelled" or "<n> done")."""

import os
import threading

import numpy as np

import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            args = (
                request.get_response_sender(),
                int(_scalar(request, "ID")),
                int(_scalar(request, "COUNT")),
                int(_scalar(request, "FLOATS")),
                _scalar(request, "DIR").decode(),
            )
            threading.Thread(target=self.stream, args=args, daemon=True).start()
        return None

    def stream(self, sender, ident, count, floats, where):
        sent = 0
        while sent < count and not sender.is_cancelled():
            out = pb_utils.Tensor("OUT", np.full(floats, sent, np.float32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sent += 1
        state = "cancelled" if sender.is_cancelled() else "done"
        with open(os.path.join(where, f"sent-{ident}.tmp"), "w") as f:
            f.write(f"{sent} {state}\n")
        os.rename(os.path.join(where, f"sent-{ident}.tmp"), os.path.join(where, f"sent-{ident}"))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
