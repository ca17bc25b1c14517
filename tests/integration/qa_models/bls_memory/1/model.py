"""BLS calls that may run out of shared memory: each answers with an error response, never
an exception, as in Triton (its QA's bls_memory and bls_memory_async)."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _request(size):
    data = np.random.default_rng(size).random((1, size), np.float32)
    tensor = pb_utils.Tensor("INPUT0", data)
    call = pb_utils.InferenceRequest(
        model_name="identity_fp32", inputs=[tensor], requested_output_names=["OUTPUT0"]
    )
    return data, call


def _outcome(data, response):
    if response.has_error():
        return response.error().message()
    output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
    return "" if np.array_equal(output, data) else "wrong output"


def _first(responses):
    response = next(responses)
    try:
        next(responses)
    except StopIteration:
        return response
    raise AssertionError("a non-decoupled callee answered more than once")


class TritonPythonModel:
    async def execute(self, requests):
        return [await self._one(request) for request in requests]

    async def _one(self, request):
        params = json.loads(request.parameters() or "{}")
        decoupled = bool(params.get("decoupled"))
        sizes = pb_utils.get_input_tensor_by_name(request, "SIZES").as_numpy().tolist()
        if params.get("async"):
            outcomes = await self._async(sizes, decoupled)
        else:
            outcomes = []
            for size in sizes:
                data, call = _request(size)
                response = _first(call.exec(decoupled=True)) if decoupled else call.exec()
                outcomes.append(_outcome(data, response))
        errors = np.array([o.encode() for o in outcomes], dtype=np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor("ERRORS", errors)])

    async def _async(self, sizes, decoupled):
        outcomes = []
        for size in sizes:
            data, call = _request(size)
            if decoupled:
                response = _first(await call.async_exec(decoupled=True))
            else:
                response = await call.async_exec()
            outcomes.append(_outcome(data, response))
        return outcomes
