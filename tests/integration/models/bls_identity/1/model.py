"""One BLS hop: identity_fp32(INPUT0), its output returned as ours."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            response = pb_utils.InferenceRequest(
                model_name="identity_fp32",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                requested_output_names=["OUTPUT0"],
            ).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                responses.append(pb_utils.InferenceResponse(response.output_tensors()))
        return responses
