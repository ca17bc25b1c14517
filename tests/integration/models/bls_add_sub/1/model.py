"""BLS, synchronous: OUTPUT0 = identity_fp32(add_sub(INPUT0, INPUT1).OUTPUT0), OUTPUT1 from
add_sub directly."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            add_sub = pb_utils.InferenceRequest(
                model_name="add_sub",
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            ).exec()
            if add_sub.has_error():
                responses.append(pb_utils.InferenceResponse(error=add_sub.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(add_sub, "OUTPUT0").as_numpy()
            identity = pb_utils.InferenceRequest(
                model_name="identity_fp32",
                inputs=[pb_utils.Tensor("INPUT0", total.reshape(1, 4))],
                requested_output_names=["OUTPUT0"],
            ).exec()
            if identity.has_error():
                responses.append(pb_utils.InferenceResponse(error=identity.error()))
                continue
            out0 = pb_utils.get_output_tensor_by_name(identity, "OUTPUT0").as_numpy()
            diff = pb_utils.get_output_tensor_by_name(add_sub, "OUTPUT1")
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(out0.reshape(4))),
                        pb_utils.Tensor("OUTPUT1", diff.as_numpy()),
                    ]
                )
            )
        return responses
