"""BLS errors come back as the response's error (exec never raises for them); with the
parameter "decoupled" the call goes through exec(decoupled=True)."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            call = pb_utils.InferenceRequest(
                model_name=params.get("model", "no_such_model"),
                inputs=[delay] if delay is not None else [],
                requested_output_names=[],
                timeout=int(params.get("timeout_us", 0)),
            )
            if params.get("decoupled"):
                answers = list(call.exec(decoupled=True))
                if len(answers) != 1:
                    raise pb_utils.TritonModelException(f"{len(answers)} responses, not 1")
                response = answers[0]
            else:
                response = call.exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                ok = pb_utils.Tensor("OK", np.array([1], dtype=np.int32))
                responses.append(pb_utils.InferenceResponse(output_tensors=[ok]))
        return responses
