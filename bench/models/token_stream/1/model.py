"""Streams max_tokens responses, text_output " t<i>", token_ms apart (a decoder's step), then
the final flag alone; a thread per request, so requests overlap."""

import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy()[0])
            step = pb_utils.get_input_tensor_by_name(request, "token_ms")
            step_s = 0.0 if step is None else float(step.as_numpy()[0]) / 1000
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, count, step_s), daemon=True).start()
        return None

    @staticmethod
    def stream(sender, count, step_s):
        for i in range(count):
            if sender.is_cancelled():
                break
            if step_s:
                time.sleep(step_s)
            token = pb_utils.Tensor("text_output", np.array([f" t{i}".encode()], np.object_))
            sender.send(pb_utils.InferenceResponse(output_tensors=[token]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
