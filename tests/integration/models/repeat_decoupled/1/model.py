"""Repeats IN, one response per element, from a thread per request; then the final flag."""

import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.lock = threading.Lock()
        self.running = 0
        self.idle = threading.Condition(self.lock)

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().copy()
            wait = int(pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0])
            if len(delays) != len(values):
                raise pb_utils.TritonModelException(
                    f"expected {len(values)} DELAY values, got {len(delays)}"
                )
            sender = request.get_response_sender()
            with self.lock:
                self.running += 1
            thread = threading.Thread(
                target=self.repeat, args=(sender, values, delays, wait), daemon=True
            )
            thread.start()
        return None

    def repeat(self, sender, values, delays, wait):
        try:
            for index, (value, delay) in enumerate(zip(values, delays, strict=True)):
                if sender.is_cancelled():
                    break
                time.sleep(delay / 1000.0)
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                idx = pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out, idx]))
            time.sleep(wait / 1000.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.running -= 1
                self.idle.notify_all()

    def finalize(self):
        with self.lock:
            self.idle.wait_for(lambda: self.running == 0, timeout=30)
