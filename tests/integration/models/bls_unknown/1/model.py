"""BLS errors come back as the response's error (exec never raises for them); with the
parameter "decoupled" the call goes through exec(decoupled=True), with "async" through
async_exec."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            call = pb_utils.InferenceRequest(
                model_name=params.get("model", "no_such_model"),
                model_version=int(params.get("version", -1)),
                inputs=[delay] if delay is not None else [],
                requested_output_names=[],
                timeout=int(params.get("timeout_us", 0)),
            )
            decoupled = bool(params.get("decoupled"))
            if params.get("async"):
                answer = await call.async_exec(decoupled=decoupled)
            else:
                answer = call.exec(decoupled=decoupled)
            if decoupled:
                answers = list(answer)
                if len(answers) != 1:
                    raise pb_utils.TritonModelException(f"{len(answers)} responses, not 1")
                answer = answers[0]
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                ok = pb_utils.Tensor("OK", np.array([1], dtype=np.int32))
                responses.append(pb_utils.InferenceResponse(output_tensors=[ok]))
        return responses
