"""Doubles its input, and logs each initialize() so a test can count them in the journal."""

import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_info(
            f"counted: initialize() ran in pid {os.getpid()} for {args['model_instance_name']}"
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x * 2)])
            )
        return responses
