"""Answers text_output = text_input upper-cased and INTS_OUT = INTS + 1, from execute()."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            upper = np.array([[v.upper() for v in row] for row in text], dtype=np.object_)
            outputs = [pb_utils.Tensor("text_output", upper)]
            ints = pb_utils.get_input_tensor_by_name(request, "INTS")
            if ints is not None:
                outputs.append(pb_utils.Tensor("INTS_OUT", ints.as_numpy() + 1))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
