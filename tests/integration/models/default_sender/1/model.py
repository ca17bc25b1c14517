"""The response sender in the default mode: exactly one response, then the final flag."""

import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def text_response(text):
    out = pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=np.object_))
    return pb_utils.InferenceResponse(output_tensors=[out])


class TritonPythonModel:
    def initialize(self, args):
        self.last_error = ""

    def attempt(self, sender, *args, **kwargs):
        try:
            sender.send(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported back to the test
            self.last_error = f"{type(exc).__name__}: {exc}"

    def later(self, sender):
        time.sleep(0.2)
        sender.send(text_response("from a thread"), flags=FINAL)

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            if mode == "return":
                responses.append(text_response("returned"))
                continue
            sender = request.get_response_sender()
            responses.append(None)
            if mode == "report":
                sender.send(text_response(self.last_error), flags=FINAL)
            elif mode == "one":
                sender.send(text_response("sent"), flags=FINAL)
            elif mode == "then_final":
                sender.send(text_response("sent, final apart"))
                sender.send(flags=FINAL)
            elif mode == "two":
                sender.send(text_response("first"))
                self.attempt(sender, text_response("second"))
                sender.send(flags=FINAL)
            elif mode == "final_first":
                self.attempt(sender, flags=FINAL)
                sender.send(text_response("after the refused final"), flags=FINAL)
            elif mode == "send_and_return":
                sender.send(text_response("sent"))
                responses[-1] = text_response("returned too")
            elif mode == "thread":
                threading.Thread(target=self.later, args=(sender,), daemon=True).start()
        return responses
