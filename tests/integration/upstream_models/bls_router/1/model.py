"""Synchronous BLS to the model MODEL_NAME names. The name goes to InferenceRequest as the
bytes a TYPE_STRING tensor holds, not decoded first (Triton's bindings accept it); a failed
call raises its message as TritonModelException."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            callee = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            answer = pb_utils.InferenceRequest(
                model_name=callee,
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=answer.output_tensors()))
        return responses
