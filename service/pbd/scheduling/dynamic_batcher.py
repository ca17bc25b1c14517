"""The dynamic batcher: Triton's ``dynamic_batching`` for a model with ``max_batch_size`` > 0.

When an instance has room, the batcher takes queued requests in priority order (see
``priority_queues.PriorityQueues``) while they fit: the sum of their batch dimensions (the first
dimension of their inputs) stays within ``max_batch_size``, and each is compatible with the
first (same inputs with the same shapes past the batch dimension, same requested outputs, as
Triton requires; the first one that is not starts the next batch). Then:

- the batch is full, or the next request does not fit: it goes now;
- else, while the oldest request has waited less than ``max_queue_delay_microseconds``: the
  largest ``preferred_batch_size`` reached goes now; none reached, it waits for more;
- once the delay is over, whatever was gathered goes.

The model's ``execute`` gets the batch as a list of requests (Python models batch themselves),
and answers one response per request. With ``preserve_ordering`` responses are released in
dispatch order, even when a later batch finishes first on another instance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from pbd.errors import PbdError
from pbd.scheduling.priority_queues import PriorityQueues
from pbd.scheduling.scheduler import Batch, InstanceT, Placement, WorkItem, answer
from pbd.types import InferResult, PreparedRequest, request_batch_size
from pbd_wire import batching
from pbd_wire.batching import BatchingPolicy

Signature = tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[str, ...]]


def signature(prepared: PreparedRequest) -> Signature:
    """What two requests must share to run in one execute."""
    inputs = tuple(sorted((i.name, i.datatype, tuple(i.shape[1:])) for i in prepared.inputs))
    return inputs, tuple(sorted(prepared.requested_outputs))


def gather(
    items: Iterable[WorkItem], policy: BatchingPolicy
) -> tuple[list[WorkItem], bool, list[WorkItem] | None]:
    """The batch ``items`` (in service order) start: (batch, closed, preferred), by the rule
    every batcher shares (``pbd_wire.batching.gather``)."""
    max_batch_size = policy.max_batch_size

    def size_of(item: WorkItem) -> int:
        return request_batch_size(item.prepared, max_batch_size)

    def signature_of(item: WorkItem) -> Signature:
        return signature(item.prepared)

    return batching.gather(items, size_of, signature_of, max_batch_size, policy.preferred)


class DynamicBatcher(PriorityQueues[InstanceT]):
    # An instance gets its next batch only once it is idle, as in Triton: a batch pipelined
    # behind a running one would be formed early and split what could have been one batch.
    pipelined = False

    def __init__(self, name: str, policy: BatchingPolicy) -> None:
        super().__init__(name, policy)
        self._finished: dict[int, tuple[Batch[InstanceT], list[InferResult | PbdError]]] = {}
        self._next_answer = 0

    async def next_batch(self, place: Placement[InstanceT]) -> Batch[InstanceT]:
        loop = asyncio.get_running_loop()
        delay = self.policy.max_delay_us / 1e6
        while True:
            if next(self.in_order(), None) is None:
                await self.wait_changed(None)  # idle: no look ten times a second
                continue
            if not place.available():
                await place.wait_capacity()
                continue
            batch, closed, preferred = gather(self.in_order(), self.policy)
            if not closed:
                left = batch[0].enqueued_at + delay - loop.time()
                if left > 0:
                    if preferred is None:
                        await self.wait_changed(left)
                        continue
                    batch = preferred
            instances = place.available()
            if not instances:
                continue
            self.take(batch)
            return Batch(instances[0], batch, self.next_ordinal())

    def requeue(self, batch: Batch[InstanceT]) -> None:
        super().requeue(batch)
        if self.policy.preserve_ordering:
            self._finished[batch.ordinal] = (batch, [])  # nothing to answer: skip its turn
            self._answer_in_order()

    def deliver(self, batch: Batch[InstanceT], outcomes: list[InferResult | PbdError]) -> None:
        if not self.policy.preserve_ordering:
            super().deliver(batch, outcomes)
            return
        self._finished[batch.ordinal] = (batch, outcomes)
        self._answer_in_order()

    def _answer_in_order(self) -> None:
        while self._next_answer in self._finished:
            batch, outcomes = self._finished.pop(self._next_answer)
            self._next_answer += 1
            for item, outcome in zip(batch.items, outcomes, strict=False):
                answer(item, outcome)
        self._changed.set()
