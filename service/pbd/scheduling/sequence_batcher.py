"""The sequence batcher: Triton's ``sequence_batching`` for stateful models.

Every request names its sequence (``sequence_id``: a non-zero uint64 or a non-empty string,
the model's ``correlation_id()``); the first request of a sequence carries the START flag and
the last the END flag (``flags()``). A sequence is bound to one instance when its first request
is dispatched, and its requests run there in arrival order, one at a time: the next is sent
once the previous one was answered. An execute takes at most one request of each sequence (the
head of every sequence bound to that instance that is ready), up to ``max_batch_size``.

A sequence ends with its END request, or when it was idle (nothing queued or running) for
``max_sequence_idle_microseconds`` (Triton's default: 1 s); a later request of it must start
it again. Triton's errors (INVALID_ARG) for a request without a sequence ID and for one of a
sequence that was not started are raised by ``submit``.

Iterative sequences (``iterative_sequence: true``) are one request each, which the model may
hand back (``Rescheduled``) to run again, as Triton's iterative sequencer does: a request
without a sequence ID gets one of its own (a counter from 1, skipping IDs in use) and the
START flag; a rescheduled request runs again with flags 0, on the same instance, after the
requests that were waiting when it came back (the back of its sequence's queue, and its turn
among the other sequences counted from then: new and rescheduled requests take turns, and
with ``max_batch_size`` they share batches). The sequence ends when its request is answered,
or abandoned by its caller.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from pbd.errors import PbdError, Rescheduled, invalid_arg
from pbd.scheduling.dynamic_batcher import gather
from pbd.scheduling.priority_queues import IDLE_RECHECK_S, PriorityQueues, queue_full
from pbd.scheduling.scheduler import Batch, InstanceT, Placement, WorkItem, answer
from pbd.types import SEQUENCE_END, SEQUENCE_START, InferResult, PreparedRequest
from pbd_wire.batching import BatchingPolicy

log = logging.getLogger("pbd.sequences")


@dataclass
class Sequence:
    key: int | str
    pending: deque[WorkItem] = field(default_factory=deque)
    instance: str = ""  # bound at its first dispatch
    running: bool = False
    ending: bool = False  # its END request is queued: a request after it must START again
    last_active: float = 0.0


class SequenceBatcher(PriorityQueues[InstanceT]):
    def __init__(
        self, name: str, model: str, policy: BatchingPolicy, idle_us: int, iterative: bool = False
    ) -> None:
        super().__init__(name, policy)
        self.model = model
        self.idle_s = idle_us / 1e6
        self.iterative = iterative
        self._sequences: dict[int | str, Sequence] = {}
        self._implicit_ids = itertools.count(1)

    def _queued(self) -> Iterator[WorkItem]:
        for sequence in self._sequences.values():
            yield from sequence.pending

    def _forget_queued(self) -> None:
        self._sequences.clear()

    def submit(self, prepared: PreparedRequest) -> asyncio.Future[InferResult]:
        key, rid = prepared.correlation_id, prepared.request.log_id
        loop = asyncio.get_running_loop()
        self._expire_idle(loop.time())
        if (key == 0 or key == "") and self.iterative:
            key = prepared.correlation_id = self._implicit_id()
            prepared.flags = SEQUENCE_START
        elif key == 0 or key == "":
            raise invalid_arg(
                f"[request id: {rid}] inference request to model '{self.model}' must specify a "
                "non-zero or non-empty correlation ID"
            )
        sequence = self._sequences.get(key)
        starts = bool(prepared.flags & SEQUENCE_START)
        if not starts and (sequence is None or sequence.ending):
            raise invalid_arg(
                f"[request id: {rid}] inference request for sequence {key} to model "
                f"'{self.model}' must specify the START flag on the first request of the "
                "sequence"
            )
        limit = self.max_size
        if limit and len(self) >= limit:
            raise queue_full(self.name, len(self), limit)
        if sequence is None:
            sequence = self._sequences[key] = Sequence(key)
        sequence.ending = bool(prepared.flags & SEQUENCE_END)
        sequence.last_active = loop.time()
        future: asyncio.Future[InferResult] = loop.create_future()
        sequence.pending.append(WorkItem(prepared, future, loop.time()))
        self._changed.set()
        return future

    def _implicit_id(self) -> int:
        """A sequence ID for an iterative sequence's request that named none."""
        while True:
            key = next(self._implicit_ids)
            if key not in self._sequences:
                return key

    def _ready(self) -> list[Sequence]:
        """Sequences whose next request may go now, oldest head first."""
        ready = []
        for sequence in list(self._sequences.values()):
            while sequence.pending and sequence.pending[0].future.done():
                sequence.pending.popleft()  # its caller gave up
                sequence.ending = sequence.ending or self.iterative  # that was its request
            if not sequence.pending and not sequence.running and sequence.ending:
                del self._sequences[sequence.key]
            elif sequence.pending and not sequence.running:
                ready.append(sequence)
        ready.sort(key=lambda s: s.pending[0].enqueued_at)
        return ready

    def _bind(self, sequence: Sequence, place: Placement[InstanceT]) -> None:
        """Bind a new sequence (or one whose instance is gone) to the instance that has the
        fewest sequences."""
        names = place.instance_names()
        if sequence.instance in names or not names:
            return
        bound = {n: 0 for n in names}
        for other in self._sequences.values():
            if other.instance in bound:
                bound[other.instance] += 1
        sequence.instance = min(names, key=lambda n: bound[n])

    def _expire_idle(self, now: float) -> None:
        for key, sequence in list(self._sequences.items()):
            idle = not sequence.pending and not sequence.running
            if idle and now - sequence.last_active > self.idle_s:
                log.info("%s: sequence %s idle for %gs, released", self.name, key, self.idle_s)
                del self._sequences[key]

    async def next_batch(self, place: Placement[InstanceT]) -> Batch[InstanceT]:
        loop = asyncio.get_running_loop()
        while True:
            self._expire_idle(loop.time())
            ready = self._ready()
            if not ready:
                await self.wait_changed()
                continue
            free = {i.plan.name: i for i in place.available()}
            for sequence in ready:
                self._bind(sequence, place)
            runnable = [s for s in ready if s.instance in free]
            if not runnable:
                await self.wait_changed(IDLE_RECHECK_S)
                continue
            target = runnable[0].instance
            heads = [s.pending[0] for s in runnable if s.instance == target]
            items, _, _ = gather(heads, self.policy)
            for sequence in runnable:
                if sequence.instance == target and sequence.pending[0] in items:
                    sequence.pending.popleft()
                    sequence.running = True
            return Batch(free[target], items, self.next_ordinal())

    def deliver(self, batch: Batch[InstanceT], outcomes: list[InferResult | PbdError]) -> None:
        now = asyncio.get_running_loop().time()
        for item, outcome in zip(batch.items, outcomes, strict=True):
            sequence = self._sequences.get(item.prepared.correlation_id)
            if not self.iterative or sequence is None:
                answer(item, outcome)  # a Rescheduled outcome fails it with Triton's error
            elif isinstance(outcome, Rescheduled) and not item.future.done():
                item.prepared.flags = 0
                item.enqueued_at = now
                sequence.pending.append(item)
            else:
                answer(item, outcome)
                sequence.ending = True  # an iterative sequence is its one request
        self._batch_done(batch)

    def _batch_done(self, batch: Batch[InstanceT]) -> None:
        now = asyncio.get_running_loop().time()
        for item in batch.items:
            sequence = self._sequences.get(item.prepared.correlation_id)
            if sequence is not None:
                sequence.running = False
                sequence.last_active = now
                if sequence.ending and not sequence.pending:
                    del self._sequences[sequence.key]
        self._changed.set()

    def requeue(self, batch: Batch[InstanceT]) -> None:
        for item in batch.items:
            sequence = self._sequences.get(item.prepared.correlation_id)
            if sequence is not None:
                sequence.pending.appendleft(item)
        self._batch_done(batch)
