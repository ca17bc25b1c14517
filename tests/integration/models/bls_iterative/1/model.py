"""BLS calls to iterative sequences: the callee reschedules its request, the caller waits."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _call(model, n, shape):
    value = pb_utils.Tensor("N", np.full(shape, n, dtype=np.int32))
    return pb_utils.InferenceRequest(
        model_name=model, inputs=[value], requested_output_names=["LOG"]
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            mode = json.loads(request.parameters())["mode"]
            if mode == "decoupled":
                answers = list(_call("iterative_decoupled", n, [1]).exec(decoupled=True))
            elif mode == "async_exec":
                answers = [await _call("iterative_count", n, [1, 1]).async_exec()]
            else:
                answers = [_call("iterative_count", n, [1, 1]).exec()]
            failed = next((a for a in answers if a.has_error()), None)
            if failed is not None:
                responses.append(pb_utils.InferenceResponse(error=failed.error()))
                continue
            logs = [
                pb_utils.get_output_tensor_by_name(a, "LOG").as_numpy().flat[0]
                for a in answers
                if a.output_tensors()
            ]
            out = pb_utils.Tensor("LOG", np.array(logs, dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
