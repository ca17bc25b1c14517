"""The response sender in the default mode, each way Triton allows and refuses it.

Every request names its MODE; a request whose mode starts with ``async_`` makes execute()
return a coroutine (as ``async def execute`` does). execute() returns None when every request
of the batch is answered by its sender, else a list.
"""

import asyncio
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
LATER_S = 0.2


def reply(text):
    out = pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=np.object_))
    return pb_utils.InferenceResponse(output_tensors=[out])


def mode_of(request):
    return pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy().reshape(-1)[0].decode()


class TritonPythonModel:
    def initialize(self, args):
        self.tasks = set()

    def later(self, *sends):
        time.sleep(LATER_S)
        self.send_all(*sends)

    def send_all(self, *sends):
        for sender, args, kwargs in sends:
            try:
                sender.send(*args, **kwargs)
            except pb_utils.TritonModelException as exc:  # refused, as Triton refuses it
                pb_utils.Logger.log_info(f"send refused: {exc}")

    def thread(self, *sends):
        threading.Thread(target=self.later, args=sends, daemon=True).start()

    async def sleep_then(self, *sends):
        await asyncio.sleep(LATER_S)
        self.send_all(*sends)

    def execute(self, requests):
        modes = [mode_of(r) for r in requests]
        if any(m.startswith("async_") for m in modes):
            return self.execute_async(requests, modes)
        return self.answer(requests, modes)

    async def execute_async(self, requests, modes):
        await asyncio.sleep(0)
        return self.answer(requests, modes)

    def answer(self, requests, modes):
        returned = [self.answer_one(r, m) for r, m in zip(requests, modes, strict=True)]
        return None if all(r is None for r in returned) else returned

    def answer_one(self, request, mode):
        if mode == "return":
            return reply("returned")
        sender = request.get_response_sender()
        if mode in ("send", "async_send"):
            sender.send(reply(f"sent by {mode}"), flags=FINAL)
        elif mode == "send_then_final":
            sender.send(reply("sent, final apart"))
            sender.send(flags=FINAL)
        elif mode == "thread":
            self.thread((sender, (reply("sent from a thread"),), {"flags": FINAL}))
        elif mode == "async_task":
            task = asyncio.get_running_loop().create_task(
                self.sleep_then((sender, (reply("sent from a task"),), {"flags": FINAL}))
            )
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif mode == "two":
            sender.send(reply("first of two"))
            sender.send(reply("second of two"))
        elif mode == "two_then_final":  # Triton's QA test_non_decoupled_two_response_pre_return
            self.send_all(
                (sender, (reply("first of two"),), {}),
                (sender, (reply("second of two"),), {}),
                (sender, (), {"flags": FINAL}),
            )
        elif mode == "final_first":
            sender.send(flags=FINAL)
        elif mode == "send_and_return":
            sender.send(reply("sent before returning"), flags=FINAL)
            return reply("returned after sending")
        elif mode == "send_unfinished_and_return":
            sender.send(reply("sent without the final flag, then returned"))
            return reply("returned after sending")
        elif mode == "return_then_thread":
            self.thread((sender, (reply("sent after returning"),), {"flags": FINAL}))
            return reply("returned before the thread sent")
        elif mode == "no_final":
            sender.send(reply("sent without the final flag"))
        elif mode == "thread_two":
            self.thread(
                (sender, (reply("first from a thread"),), {}),
                (sender, (reply("second from a thread"),), {}),
                (sender, (), {"flags": FINAL}),
            )
        else:
            raise ValueError(f"unknown MODE {mode!r}")
        return None
