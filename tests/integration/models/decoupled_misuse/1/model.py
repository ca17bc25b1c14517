"""Decoupled misuse on purpose; MODE picks the mistake, "report" returns the error it got."""

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def text_response(text):
    out = pb_utils.Tensor("ERROR", np.array([text.encode()], dtype=np.object_))
    return pb_utils.InferenceResponse(output_tensors=[out])


class TritonPythonModel:
    def initialize(self, args):
        self.last_error = ""

    def attempt(self, sender, *args, **kwargs):
        try:
            sender.send(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported back to the test
            self.last_error = f"{type(exc).__name__}: {exc}"

    def execute(self, requests):
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            if mode == "return_responses":
                return [text_response("returned") for _ in requests]
            if mode == "raise":
                raise pb_utils.TritonModelException("the model raised on purpose")
            sender = request.get_response_sender()
            if mode == "report":
                sender.send(text_response(self.last_error), flags=FINAL)
            elif mode == "send_after_final":
                sender.send(text_response("first"), flags=FINAL)
                self.attempt(sender, text_response("second"))
            elif mode == "bad_flag":
                self.attempt(sender, text_response("flagged"), flags=7)
                sender.send(flags=FINAL)
            elif mode == "no_response":
                self.attempt(sender, None, flags=0)
                sender.send(flags=FINAL)
            elif mode == "error_response":
                error = pb_utils.TritonError("the model sent an error response")
                sender.send(pb_utils.InferenceResponse(error=error))
                sender.send(text_response("after the error"), flags=FINAL)
            else:
                sender.send(text_response(f"unknown mode {mode}"), flags=FINAL)
        return None
