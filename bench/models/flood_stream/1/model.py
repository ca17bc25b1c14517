"""Streams COUNT responses of FLOATS floats each, until done or cancelled (bench/slow_reader)."""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            floats = int(pb_utils.get_input_tensor_by_name(request, "FLOATS").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, count, floats), daemon=True).start()
        return None

    def stream(self, sender, count, floats):
        values = np.zeros(floats, np.float32)
        for _ in range(count):
            if sender.is_cancelled():
                break
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", values)]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
