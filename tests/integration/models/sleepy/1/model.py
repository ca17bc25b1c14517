"""Sleeps DELAY_MS milliseconds and echoes it: a request that is reliably in flight."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()
            marker = pb_utils.get_input_tensor_by_name(request, "MARKER")
            if marker is not None:
                with open(marker.as_numpy()[0].decode("utf-8"), "w") as f:
                    f.write("executing\n")
            time.sleep(int(delay[0]) / 1000.0)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SLEPT_MS", delay)])
            )
        return responses
