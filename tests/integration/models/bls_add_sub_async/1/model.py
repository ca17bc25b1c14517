"""BLS from ``async def execute``: add_sub and identity_fp32 awaited together."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            add_sub, identity = await asyncio.gather(
                pb_utils.InferenceRequest(
                    model_name="add_sub", inputs=[in0, in1], requested_output_names=["OUTPUT1"]
                ).async_exec(),
                pb_utils.InferenceRequest(
                    model_name="identity_fp32",
                    inputs=[pb_utils.Tensor("INPUT0", in0.as_numpy().reshape(1, 4) * 2)],
                    requested_output_names=["OUTPUT0"],
                ).async_exec(),
            )
            for response in (add_sub, identity):
                if response.has_error():
                    responses.append(pb_utils.InferenceResponse(error=response.error()))
                    break
            else:
                doubled = pb_utils.get_output_tensor_by_name(identity, "OUTPUT0").as_numpy()
                diff = pb_utils.get_output_tensor_by_name(add_sub, "OUTPUT1")
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUTPUT0", doubled.reshape(4).copy()),
                            pb_utils.Tensor("OUTPUT1", diff.as_numpy()),
                        ]
                    )
                )
        return responses
