"""The per-model request queue instances take work from.

One request per ``execute`` call, in arrival order, as Triton's default scheduler does. The
dynamic batcher will sit behind the same two calls (``submit``, ``next``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pbd.errors import PbdError
from pbd.types import InferResult
from pbd.validation import PreparedRequest


@dataclass
class WorkItem:
    prepared: PreparedRequest
    future: asyncio.Future[InferResult]
    enqueued_at: float = 0.0


class RequestQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[WorkItem] = asyncio.Queue()

    def __len__(self) -> int:
        return self._queue.qsize()

    def submit(self, prepared: PreparedRequest) -> asyncio.Future[InferResult]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferResult] = loop.create_future()
        self._queue.put_nowait(WorkItem(prepared, future, loop.time()))
        return future

    def fail_older_than(self, when: float, error: PbdError) -> int:
        """Fail queued requests that arrived before ``when``; how many there were."""
        failed = 0
        for item in list(self._queue._queue):  # type: ignore[attr-defined]
            if item.enqueued_at < when and not item.future.done():
                item.future.set_exception(error)
                failed += 1
        return failed

    async def next(self) -> WorkItem:
        """The oldest request whose caller still waits (cancelled ones are dropped here)."""
        while True:
            item = await self._queue.get()
            if not item.future.done():
                return item

    def fail_all(self, error: PbdError) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(error)


async def wait_result(future: asyncio.Future[InferResult]) -> InferResult:
    """Await a submitted request; if the caller is cancelled after the result arrived, the
    result's shared memory is still handed back."""
    try:
        return await future
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            future.result().release()
        raise
