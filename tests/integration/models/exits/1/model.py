"""Ends its own process when asked to: os._exit(3) or sys.exit(4)."""

import os
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            how = pb_utils.get_input_tensor_by_name(request, "HOW")
            text = how.as_numpy()[0].decode("utf-8")
            if text == "os._exit":
                os._exit(3)
            if text == "sys.exit":
                sys.exit(4)
            responses.append(pb_utils.InferenceResponse(output_tensors=[how]))
        return responses
