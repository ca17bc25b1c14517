"""async_exec(decoupled=True) on square_stream twice, awaited together; each awaited result is
an iterator of responses whose last carries only the final flag."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "IN")
            streams = await asyncio.gather(
                *(
                    pb_utils.InferenceRequest(
                        model_name="square_stream",
                        inputs=[count],
                        requested_output_names=["OUT"],
                    ).async_exec(decoupled=True)
                    for _ in range(2)
                )
            )
            total = np.array([0])
            for stream in streams:
                for answer in stream:
                    if answer.has_error():
                        raise pb_utils.TritonModelException(answer.error().message())
                    if answer.output_tensors():
                        total += pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
