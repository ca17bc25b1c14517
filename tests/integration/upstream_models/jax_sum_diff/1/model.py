"""Sum and difference by a jitted jax.numpy function; the results converted back to numpy."""

import jax
import jax.numpy as jnp
import numpy as np

import triton_python_backend_utils as pb_utils


@jax.jit
def sum_diff(a, b):
    return jnp.add(a, b), jnp.subtract(a, b)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total, diff = sum_diff(a, b)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", np.asarray(total, np.float32)),
                        pb_utils.Tensor("OUTPUT1", np.asarray(diff, np.float32)),
                    ]
                )
            )
        return responses
