"""OUTPUT0 = INPUT0 (FP32), the model both servers run in ``python -m bench.vs_triton``.

Plain ``triton_python_backend_utils`` only, so Triton's python_backend (stub on the system's
Python) and pbd's worker run the same file.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            output = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
