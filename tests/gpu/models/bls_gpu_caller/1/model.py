"""Moves its input to the GPU and passes it, as a GPU tensor, to gpu_identity through BLS;
answers the callee's output and where the callee saw its input."""

import cupy

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            host = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            on_gpu = pb_utils.Tensor.from_dlpack("INPUT0", cupy.asarray(host))
            call = pb_utils.InferenceRequest(
                model_name="gpu_identity",
                inputs=[on_gpu],
                requested_output_names=["OUTPUT0", "ON_CPU"],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            where = pb_utils.get_output_tensor_by_name(answer, "ON_CPU")
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", out.as_numpy()),
                        pb_utils.Tensor("CALLEE_ON_CPU", where.as_numpy()),
                    ]
                )
            )
        return responses
