"""A finished decoupled BLS response iterator, iterated again, gives its responses again."""

import numpy as np

import triton_python_backend_utils as pb_utils


def _values(responses):
    out = []
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        tensor = pb_utils.get_output_tensor_by_name(response, "OUT")
        if tensor is not None:
            out.append(int(tensor.as_numpy()[0]))
    return out


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                inputs=[
                    pb_utils.Tensor("IN", values),
                    pb_utils.Tensor("DELAY", np.zeros(len(values), np.uint32)),
                    pb_utils.Tensor("WAIT", np.zeros(1, np.uint32)),
                ],
                requested_output_names=["OUT"],
            )
            responses = call.exec(decoupled=True)
            first = list(responses)
            second = list(responses)
            answers.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("FIRST", np.array(_values(first), np.int32)),
                        pb_utils.Tensor("SECOND", np.array(_values(second), np.int32)),
                        pb_utils.Tensor("COUNTS", np.array([len(first), len(second)], np.int32)),
                    ]
                )
            )
        return answers
