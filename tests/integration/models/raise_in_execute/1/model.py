"""Raises for a negative input and echoes anything else, so one instance sees both."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if value[0] < 0:
                raise ValueError("boom from execute")
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", value)])
            )
        return responses
