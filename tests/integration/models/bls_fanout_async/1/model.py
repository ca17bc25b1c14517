"""Triton's QA case async_execute ConcurrencyTest (multiple requests through BLS), in a form
whose outcome can be read from the responses: each request makes one decoupled BLS call to
bls_gate_decoupled (which answers only once COUNT calls of the group arrived), awaits
``async_exec``, then iterates the responses synchronously, as Triton's QA model does.

When a call is sent, the model counts it and leaves a file ``sent-<request id>`` in MARKS (a
directory the client watches); each response carries SENT, the count when the awaited
iterator came back (its first response in).
"""

import asyncio
import os

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def text_of(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0].decode()


class TritonPythonModel:
    def initialize(self, args):
        self.sent = 0

    async def execute(self, requests):
        await asyncio.gather(*(self.answer(request) for request in requests))
        return None

    async def answer(self, request):
        sender = request.get_response_sender()
        call = pb_utils.InferenceRequest(
            model_name="bls_gate_decoupled",
            inputs=[
                pb_utils.get_input_tensor_by_name(request, "GROUP"),
                pb_utils.get_input_tensor_by_name(request, "COUNT"),
            ],
            requested_output_names=["ARRIVED"],
        )
        pending = call.async_exec(decoupled=True)  # the call is sent here
        self.sent += 1
        with open(os.path.join(text_of(request, "MARKS"), f"sent-{request.request_id()}"), "w"):
            pass
        responses = await pending
        sent = pb_utils.Tensor("SENT", np.array([self.sent], np.int32))
        for response in responses:  # read synchronously, as Triton's QA model reads them
            arrived = pb_utils.get_output_tensor_by_name(response, "ARRIVED")
            if arrived is not None:  # not the final flag alone
                sender.send(pb_utils.InferenceResponse(output_tensors=[arrived, sent]))
        sender.send(flags=FINAL)
