"""Two identical BLS calls to "counter"; the second is answered by the response cache."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            answers = []
            for _ in range(2):
                call = pb_utils.InferenceRequest(
                    model_name="counter",
                    inputs=[pb_utils.Tensor("X", x.as_numpy())],
                    requested_output_names=["Y"],
                )
                response = call.exec()
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                answers.append(pb_utils.get_output_tensor_by_name(response, "Y").as_numpy())
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("FIRST", answers[0]),
                        pb_utils.Tensor("SECOND", answers[1]),
                    ]
                )
            )
        return responses
