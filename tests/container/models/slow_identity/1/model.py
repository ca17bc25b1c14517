"""Echoes INPUT0 after DELAY_MS milliseconds; creates MARKER first when it is sent."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            marker = pb_utils.get_input_tensor_by_name(request, "MARKER")
            if marker is not None:
                with open(marker.as_numpy()[0].decode("utf-8"), "w") as f:
                    f.write("executing\n")
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            if delay is not None:
                time.sleep(int(delay.as_numpy()[0]) / 1000.0)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)])
            )
        return responses
