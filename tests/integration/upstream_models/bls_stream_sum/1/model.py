"""exec(decoupled=True) on square_stream, iterating its responses; the last one carries only
the final flag and no tensors. The sum is kept in numpy's default integer (INT64): Triton 2.51
sends the tensor as the model made it, though the config says INT32."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = np.array([0])
            stream = pb_utils.InferenceRequest(
                model_name="square_stream",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
            ).exec(decoupled=True)
            for answer in stream:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                if answer.output_tensors():
                    total += pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
