"""``async def execute``: async_exec() to each callee the config's ``callees`` parameter
lists, awaited together with asyncio.gather; OUTPUT0 comes from the first, OUTPUT1 from the
second."""

import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.callees = parameters["callees"]["string_value"].split(",")

    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            answers = await asyncio.gather(
                *(
                    pb_utils.InferenceRequest(
                        model_name=callee,
                        inputs=inputs,
                        requested_output_names=["OUTPUT0", "OUTPUT1"],
                    ).async_exec()
                    for callee in self.callees
                )
            )
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(answers[0], "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(answers[1], "OUTPUT1"),
                    ]
                )
            )
        return responses
