"""``async def execute`` in a decoupled model: requests run concurrently on one event loop.

Each request waits until COUNT requests of its GROUP have started (which only happens if their
coroutines run at once), then, as MODE says: awaits ``async_exec`` on add_sub ("async"),
calls ``exec`` from the coroutine ("sync"), awaits ``async_exec(decoupled=True)`` on
repeat_decoupled and streams its responses ("stream"), raises ("raise"), or cancels its own
task ("cancel_self"). Every response
carries PEERS, how many requests of the group had started when this one went on.
"""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
LONGEST_WAIT_S = 60.0


def text_of(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0].decode()


class TritonPythonModel:
    def initialize(self, args):
        self.started = {}  # group -> how many of its requests started
        self.loops = set()

    async def execute(self, requests):
        for request in requests:
            await self.answer(request, request.get_response_sender())
        return None

    async def answer(self, request, sender):
        group = text_of(request, "GROUP")
        mode = text_of(request, "MODE")
        count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
        value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy().copy()
        self.loops.add(id(asyncio.get_running_loop()))
        self.started[group] = self.started.get(group, 0) + 1
        deadline = asyncio.get_running_loop().time() + LONGEST_WAIT_S
        while self.started[group] < count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        peers = np.array([self.started[group]], dtype=np.int32)
        if len(self.loops) != 1:
            raise RuntimeError(f"requests ran on {len(self.loops)} event loops")

        def respond(out):
            tensors = [pb_utils.Tensor("OUT", np.asarray(out, np.float32)),
                       pb_utils.Tensor("PEERS", peers)]  # fmt: skip
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors))

        add = pb_utils.InferenceRequest(
            model_name="add_sub",
            inputs=[pb_utils.Tensor("INPUT0", value), pb_utils.Tensor("INPUT1", value)],
            requested_output_names=["OUTPUT0"],
        )
        if mode == "async":
            respond(pb_utils.get_output_tensor_by_name(await add.async_exec(), "OUTPUT0")
                    .as_numpy())  # fmt: skip
        elif mode == "sync":
            respond(pb_utils.get_output_tensor_by_name(add.exec(), "OUTPUT0").as_numpy())
        elif mode == "stream":
            values = value.astype(np.int32)
            repeat = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                inputs=[
                    pb_utils.Tensor("IN", values),
                    pb_utils.Tensor("DELAY", np.full(len(values), 5, np.uint32)),
                    pb_utils.Tensor("WAIT", np.array([0], np.uint32)),
                ],  # fmt: skip
                requested_output_names=["OUT"],
            )
            for response in await repeat.async_exec(decoupled=True):
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:
                    respond(out.as_numpy().astype(np.float32))
        elif mode == "cancel_self":
            asyncio.current_task().cancel()
            await asyncio.sleep(0)
        elif mode == "raise":
            raise RuntimeError(f"request {request.request_id()} raised on purpose")
        sender.send(flags=FINAL)
