"""BLS to decoupled models: repeat_decoupled's responses summed (sync or async), or a stream of
cancel_probe_decoupled cancelled after a few responses."""

import asyncio
import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _result(total, count, empty):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("TOTAL", np.array([total], dtype=np.int32)),
            pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
            pb_utils.Tensor("EMPTY", np.array([empty], dtype=np.int32)),
        ]
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            take = int(params.get("take", 0))
            if take:
                responses.append(self.cancel_after(values, take, params["dir"]))
                continue
            call = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                inputs=[
                    pb_utils.Tensor("IN", values.astype(np.int32)),
                    pb_utils.Tensor("DELAY", np.zeros(len(values), dtype=np.uint32)),
                    pb_utils.Tensor("WAIT", np.array([0], dtype=np.uint32)),
                ],
                requested_output_names=["OUT", "IDX"],
            )
            if params.get("mode") == "async":
                stream = await call.async_exec(decoupled=True)
            else:
                stream = call.exec(decoupled=True)
            total = count = empty = 0
            error = None
            for response in stream:
                if response.has_error():
                    error = response.error()
                    break
                # A decoupled model's last response may carry no outputs (the final flag).
                if not response.output_tensors():
                    empty += 1
                    continue
                out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
                out *= 2  # BLS outputs are writable, as in Triton
                total += int(out[0]) // 2
                count += 1
            responses.append(
                pb_utils.InferenceResponse(error=error) if error else _result(total, count, empty)
            )
            await asyncio.sleep(0)
        return responses

    def cancel_after(self, values, take, where):
        stream = pb_utils.InferenceRequest(
            model_name="cancel_probe_decoupled",
            inputs=[
                pb_utils.Tensor("ID", values[:1].astype(np.int32)),
                pb_utils.Tensor("DIR", np.array([where.encode()], dtype=np.object_)),
            ],
            requested_output_names=["ID"],
        ).exec(decoupled=True)
        count = 0
        for response in stream:
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            count += 1
            if count == take:
                stream.cancel()
        return _result(0, count, 0)
