"""Sends each element of IN as its own response from a thread, pausing DELAY[i] ms before the
i-th; execute sleeps WAIT ms and returns None, whether or not the thread has finished."""

import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if len(requests) != 1:
            raise pb_utils.TritonModelException(f"one request at a time, got {len(requests)}")
        request = requests[0]
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
        if values.shape != delays.shape:
            raise pb_utils.TritonModelException(
                f"IN and DELAY differ in shape: {list(values.shape)} and {list(delays.shape)}"
            )
        threading.Thread(
            target=self._answer,
            args=(request.get_response_sender(), values, delays),
            daemon=True,
        ).start()
        wait_ms = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0]
        time.sleep(wait_ms / 1000)
        return None

    @staticmethod
    def _answer(sender, values, delays):
        for index, (value, delay_ms) in enumerate(zip(values, delays, strict=True)):
            time.sleep(delay_ms / 1000)
            outputs = [
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("IDX", np.array([index], np.uint32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
