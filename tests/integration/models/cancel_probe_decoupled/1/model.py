"""Streams until the client cancels, then says so in a file and closes the stream."""

import os
import threading
import time

import triton_python_backend_utils as pb_utils

LONGEST_STREAM_S = 120.0


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            ident = pb_utils.get_input_tensor_by_name(request, "ID").as_numpy().copy()
            where = pb_utils.get_input_tensor_by_name(request, "DIR").as_numpy()[0].decode()
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, ident, where), daemon=True).start()
        return None

    def stream(self, sender, ident, where):
        deadline = time.monotonic() + LONGEST_STREAM_S
        while time.monotonic() < deadline and not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("ID", ident)]))
            time.sleep(0.01)
        if sender.is_cancelled():
            with open(os.path.join(where, f"cancelled-{int(ident[0])}"), "w") as f:
                f.write("yes\n")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
