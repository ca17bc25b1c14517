"""Sync BLS from processes the model forks (multiprocessing.Pool), as Triton's QA does."""

import multiprocessing

import numpy as np

import triton_python_backend_utils as pb_utils


def bls_add_sub(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.random(4, np.float32), rng.random(4, np.float32)
    call = pb_utils.InferenceRequest(
        model_name="add_sub",
        inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
        requested_output_names=["OUTPUT0", "OUTPUT1"],
    )
    response = call.exec()
    if response.has_error():
        return 0
    out0 = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
    out1 = pb_utils.get_output_tensor_by_name(response, "OUTPUT1").as_numpy()
    return int(np.array_equal(out0, a + b) and np.array_equal(out1, a - b))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            calls = int(pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0])
            timeout = float(pb_utils.get_input_tensor_by_name(request, "TIMEOUT_S").as_numpy()[0])
            pool = multiprocessing.get_context("fork").Pool(calls)
            try:
                ok = pool.map_async(bls_add_sub, range(calls)).get(timeout)
            finally:
                pool.terminate()
                pool.join()
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OK", np.array(ok, np.int32))])
            )
        return responses
