"""BYTES example: upper-cases each string and reports its length in bytes."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            # BYTES tensors arrive as numpy object arrays whose elements are bytes.
            strings = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            upper = np.array(
                [s.decode("utf-8").upper().encode("utf-8") for s in strings.flat],
                dtype=np.object_,
            ).reshape(strings.shape)
            lengths = np.array([len(s) for s in strings.flat], dtype=np.int32).reshape(
                strings.shape
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("UPPER", upper),
                        pb_utils.Tensor("LENGTH", lengths),
                    ]
                )
            )
        return responses
