"""Echoes every IN_<T> it receives as OUT_<T>; inputs not sent produce no output."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [
                pb_utils.Tensor("OUT_" + tensor.name()[len("IN_") :], tensor.as_numpy())
                for tensor in request.inputs()
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
