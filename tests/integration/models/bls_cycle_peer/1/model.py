"""One side of a BLS cycle: calls 'bls_cycle' while HOPS > 0; its error becomes ours."""

import numpy as np

import triton_python_backend_utils as pb_utils

PEER = "bls_cycle"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            hops = int(pb_utils.get_input_tensor_by_name(request, "HOPS").as_numpy()[0])
            done = np.array([0], dtype=np.int32)
            if hops > 0:
                inner = pb_utils.InferenceRequest(
                    model_name=PEER,
                    inputs=[pb_utils.Tensor("HOPS", np.array([hops - 1], dtype=np.int32))],
                    requested_output_names=["HOPS_DONE"],
                ).exec()
                if inner.has_error():
                    responses.append(pb_utils.InferenceResponse(error=inner.error()))
                    continue
                done = pb_utils.get_output_tensor_by_name(inner, "HOPS_DONE").as_numpy() + 1
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("HOPS_DONE", done)])
            )
        return responses
