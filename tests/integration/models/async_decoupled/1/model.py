"""async def execute in a decoupled model: answers through the senders, after awaiting."""

import asyncio
import os
import time

import triton_python_backend_utils as pb_utils

LONGEST_WAIT_S = 120.0


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            ident = pb_utils.get_input_tensor_by_name(request, "ID").as_numpy().copy()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            gate = pb_utils.get_input_tensor_by_name(request, "GATE")
            sender = request.get_response_sender()
            if gate is not None:
                path = gate.as_numpy()[0].decode()
                with open(path + ".reached", "w"):  # tests wait for this: the request is here
                    pass
                deadline = time.monotonic() + LONGEST_WAIT_S
                while os.path.exists(path) and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            for _ in range(count):
                out = pb_utils.Tensor("ID", ident)
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                await asyncio.sleep(0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
