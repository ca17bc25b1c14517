"""Writes what it is told: the answer is ``text_input`` verbatim, or for the prompt
``!params`` the ``sampling_parameters`` JSON it got (``{}`` without one).

- ``stream`` true: one response per 4 characters, then the final flag alone; false or absent:
  one response with the whole text, final.
- Every response carries ``num_input_tokens`` (the prompt's characters) and
  ``num_output_tokens`` (the characters in that response): a "token" is a character.
- ``logprobs`` in sampling_parameters (N): each response also carries the output ``logprobs``,
  for each character at offset ``i`` of the answer ``{"token": c, "logprob": -(i + 1) / 10,
  "top_logprobs": N entries}``, the first the character itself, then ``<k>`` at ``logprob - k``.
"""

import json
import threading

import numpy as np

import triton_python_backend_utils as pb_utils

PIECE = 4


def _text(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0].decode("utf-8")


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.answer, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        prompt = _text(request, "text_input", "")
        stream = pb_utils.get_input_tensor_by_name(request, "stream")
        stream = stream is not None and bool(stream.as_numpy().reshape(-1)[0])
        sampling = _text(request, "sampling_parameters", "{}")
        top = json.loads(sampling).get("logprobs")
        text = sampling if prompt == "!params" else prompt
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream:
            sender.send(self.response(text, 0, len(prompt), top), flags=final)
            return
        for at in range(0, len(text), PIECE):
            sender.send(self.response(text[at : at + PIECE], at, len(prompt), top))
        sender.send(flags=final)

    @staticmethod
    def response(text, offset, num_input, top):
        outputs = [
            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([num_input], dtype=np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([len(text)], dtype=np.int32)),
        ]
        if top is not None:
            tokens = []
            for i, char in enumerate(text, offset):
                logprob = -(i + 1) / 10
                alternatives = [(char, logprob)] + [(f"<{k}>", logprob - k) for k in range(1, top)]
                tokens.append(
                    {
                        "token": char,
                        "logprob": logprob,
                        "top_logprobs": [{"token": t, "logprob": p} for t, p in alternatives[:top]],
                    }
                )
            logprobs = json.dumps(tokens).encode()
            outputs.append(pb_utils.Tensor("logprobs", np.array([logprobs], dtype=np.object_)))
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=10)
