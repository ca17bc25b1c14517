"""Echoes its inputs as outputs (INTS -> INTS_OUT, ...), and the request's parameters as JSON
in PARAMS; text_output is text_input, followed by ``|`` and sampling_parameters when given.
MODE (or a prompt ``!<mode> ...``, for clients that send text only) picks the responses:

- ``one`` (default): one response, then the final flag alone;
- ``one_final``: one response with the final flag;
- ``three``: three responses (text_output "<text>0", "<text>1", "<text>2"), then the flag;
- ``none``: only the final flag;
- ``error_first``: an error response (final);
- ``error_mid``: one response, then an error response (final);
- ``raise``: execute() raises;
- ``slow``: a response every 50 ms until cancelled (then the final flag), at most 200;
- ``flood``: 2000 responses of 64 KiB of text as fast as it can, until cancelled.

A request cancelled before its answer is complete is counted in the metric
``generate_probe_cancelled_total``.
"""

import json
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

_ECHO = {
    "INTS": "INTS_OUT", "FP": "FP_OUT", "FLAG": "FLAG_OUT", "WORDS": "WORDS_OUT",
    "GRID": "GRID_OUT",
}  # fmt: skip
_FLOOD = "x" * 65536


def _text(request):
    text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
    text = text.reshape(-1)[0].decode()
    sampling = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
    if sampling is not None:
        text += "|" + sampling.as_numpy().reshape(-1)[0].decode()
    return text


def _mode(request, text):
    mode = pb_utils.get_input_tensor_by_name(request, "MODE")
    if mode is not None:
        return mode.as_numpy().reshape(-1)[0].decode()
    if text.startswith("!"):
        return text[1:].split()[0]
    return "one"


def _echo(request, text):
    outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
    for name, out in _ECHO.items():
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            outputs.append(pb_utils.Tensor(out, tensor.as_numpy()))
    params = json.dumps(json.loads(request.parameters()), sort_keys=True)
    outputs.append(pb_utils.Tensor("PARAMS", np.array([params.encode()], dtype=np.object_)))
    return pb_utils.InferenceResponse(output_tensors=outputs)


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []
        # The family must outlive its metric (Triton deletes a metric with its family).
        self.family = pb_utils.MetricFamily(
            name="generate_probe_cancelled_total",
            description="Requests cancelled before their answer was complete",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.cancelled = self.family.Metric(labels={})

    def execute(self, requests):
        for request in requests:
            text = _text(request)
            mode = _mode(request, text)
            if mode == "raise":
                raise pb_utils.TritonModelException("execute failed on purpose")
            thread = threading.Thread(target=self.answer, args=(request, mode, text), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def answer(self, request, mode, text):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if mode == "one":
            sender.send(_echo(request, text))
            sender.send(flags=final)
        elif mode == "one_final":
            sender.send(_echo(request, text), flags=final)
        elif mode == "three":
            for i in range(3):
                sender.send(_echo(request, f"{text}{i}"))
            sender.send(flags=final)
        elif mode == "none":
            sender.send(flags=final)
        elif mode == "error_first":
            error = pb_utils.TritonError("first failed")
            sender.send(pb_utils.InferenceResponse(error=error), flags=final)
        elif mode == "error_mid":
            sender.send(_echo(request, text))
            error = pb_utils.TritonError("then failed")
            sender.send(pb_utils.InferenceResponse(error=error), flags=final)
        elif mode in ("slow", "flood"):
            self.stream(sender, request, text, mode)
        else:
            error = pb_utils.TritonError(f"mode {mode}?")
            sender.send(pb_utils.InferenceResponse(error=error), flags=final)

    def stream(self, sender, request, text, mode):
        count, delay, piece = (200, 0.05, text) if mode == "slow" else (2000, 0.0, _FLOOD)
        for i in range(count):
            if sender.is_cancelled():
                self.cancelled.increment(1)
                break
            sender.send(_echo(request, f"{piece}{i}"))
            time.sleep(delay)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=15)
