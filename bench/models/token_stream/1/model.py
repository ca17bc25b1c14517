"""Streams max_tokens responses, text_output " t<i>", then the final flag alone; a thread per
request, so requests overlap."""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, count), daemon=True).start()
        return None

    @staticmethod
    def stream(sender, count):
        for i in range(count):
            if sender.is_cancelled():
                break
            token = pb_utils.Tensor("text_output", np.array([f" t{i}".encode()], np.object_))
            sender.send(pb_utils.InferenceResponse(output_tensors=[token]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
