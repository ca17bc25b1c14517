"""A weightless "LLM": streams the prompt's words back, each written backwards.

- ``text_input``: the prompt; its words are the input tokens, the answer's words the output.
- ``stream`` true: one response per token (the first without a leading space), then the final
  flag alone; false or absent: one response with the whole text, final.
- ``max_tokens`` (default 16) bounds the answer; ``stop``: the answer ends before the first
  token equal to one of them. ``temperature`` > 0 shuffles the words, with ``seed`` when given.
- Every response carries ``num_input_tokens`` and ``num_output_tokens`` (the tokens in that
  response), which is how pbd's OpenAI API learns the usage counts.
- A cancelled request (the client went away) stops at the next token; it is counted in the
  metric ``tiny_llm_cancelled_total``.
"""

import json
import random
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


def _strings(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    return [v.decode("utf-8", "replace") for v in tensor.as_numpy().reshape(-1)]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("token_delay_ms", {}).get("string_value", "0")
        self.delay_s = float(delay) / 1000.0
        # The family must outlive its metric (Triton deletes a metric with its family).
        self.family = pb_utils.MetricFamily(
            name="tiny_llm_cancelled_total",
            description="Requests whose client went away before the answer was complete",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.cancelled = self.family.Metric(labels={})
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.generate, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = _scalar(request, "text_input", b"").decode("utf-8", "replace")
        stream = bool(_scalar(request, "stream", False))
        max_tokens = int(_scalar(request, "max_tokens", 16))
        temperature = float(_scalar(request, "temperature", 0.0))
        seed = _scalar(request, "seed", None)
        stops = set(_strings(request, "stop"))
        words = prompt.split()
        if temperature > 0:
            random.Random(None if seed is None else int(seed)).shuffle(words)
        tokens = []
        for word in words[: max(max_tokens, 0)]:
            token = word[::-1]
            if token in stops:
                break
            tokens.append(token)
        counts = len(prompt.split())
        sent = []
        for token in tokens:
            if sender.is_cancelled():
                self.cancelled.increment(1)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            time.sleep(self.delay_s)
            piece = token if not sent else " " + token
            sent.append(piece)
            if stream:
                sender.send(self.response(piece, counts, 1))
        if stream:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            sender.send(
                self.response("".join(sent), counts, len(sent)),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    @staticmethod
    def response(text, num_input, num_output):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([num_input], dtype=np.int32)),
                pb_utils.Tensor("num_output_tokens", np.array([num_output], dtype=np.int32)),
            ]
        )

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=10)
