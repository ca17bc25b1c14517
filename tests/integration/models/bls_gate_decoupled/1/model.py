"""Each request waits until COUNT requests of its GROUP have arrived (bounded by
LONGEST_WAIT_S, so a group that never fills answers rather than hangs), then gets one response,
sent with the final flag: ARRIVED, how many of the group had arrived."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
LONGEST_WAIT_S = 15.0


class TritonPythonModel:
    def initialize(self, args):
        self.arrived = {}  # group -> how many of its requests arrived

    async def execute(self, requests):
        for request in requests:
            asyncio.get_running_loop().create_task(self.answer(request))
        return None

    async def answer(self, request):
        group = pb_utils.get_input_tensor_by_name(request, "GROUP").as_numpy()[0].decode()
        count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
        sender = request.get_response_sender()
        self.arrived[group] = self.arrived.get(group, 0) + 1
        deadline = asyncio.get_running_loop().time() + LONGEST_WAIT_S
        while self.arrived[group] < count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        arrived = pb_utils.Tensor("ARRIVED", np.array([self.arrived[group]], np.int32))
        sender.send(pb_utils.InferenceResponse(output_tensors=[arrived]), flags=FINAL)
