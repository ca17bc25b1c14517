"""The per-model request queue instances take work from.

One request per ``execute`` call, in arrival order, as Triton's default scheduler does. The
dynamic batcher will sit behind the same two calls (``submit``, ``next``).

A queue may be bounded (``max_size``, Triton's ``default_queue_policy.max_queue_size``): a
request that would make more than that many wait is refused with Triton's UNAVAILABLE
"Exceeds maximum queue size", which clients treat as "retry later". Requests whose callers
gave up (cancelled, disconnected) do not count.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pbd.errors import PbdError, unavailable
from pbd.types import InferResult
from pbd.validation import PreparedRequest


@dataclass
class WorkItem:
    prepared: PreparedRequest
    future: asyncio.Future[InferResult]
    enqueued_at: float = 0.0


class RequestQueue:
    def __init__(self, name: str = "", max_size: int = 0) -> None:
        self._queue: asyncio.Queue[WorkItem] = asyncio.Queue()
        self.name = name  # "model 'x' version 1", for the message of a full queue
        self.max_size = max_size  # 0: unbounded

    def __len__(self) -> int:
        return self._queue.qsize()

    def submit(
        self, prepared: PreparedRequest, also_waiting: int = 0
    ) -> asyncio.Future[InferResult]:
        """Queue a request; ``also_waiting`` counts requests taken off the queue that still
        wait for an instance. Raises UNAVAILABLE when the queue is full."""
        if self.max_size and self._queue.qsize() + also_waiting >= self.max_size:
            self._drop_abandoned()
            if self._queue.qsize() + also_waiting >= self.max_size:
                raise unavailable(
                    f"Exceeds maximum queue size: {self.name} already has "
                    f"{self._queue.qsize() + also_waiting} requests waiting "
                    f"(max_queue_size {self.max_size})"
                )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferResult] = loop.create_future()
        self._queue.put_nowait(WorkItem(prepared, future, loop.time()))
        return future

    def requeue(self, item: WorkItem) -> None:
        """Put back, first in line, a request that could not be handed to its instance."""
        self._queue.put_nowait(item)
        self._queue._queue.rotate(1)  # type: ignore[attr-defined]

    def _drop_abandoned(self) -> None:
        """Forget queued requests whose callers gave up (their inputs go with them)."""
        items = self._queue._queue  # type: ignore[attr-defined]
        live = [item for item in items if not item.future.done()]
        if len(live) != len(items):
            items.clear()
            items.extend(live)

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
