"""The per-model request queue instances take work from, and what every scheduler shares.

A scheduler (this queue, the dynamic batcher in ``batching.py``, the sequence batcher in
``sequences.py``) is what the version's dispatcher talks to:

- ``submit(prepared)``: queue a request (or refuse it: full queue, bad sequence flags);
- ``await next_batch(place)``: the next batch and the instance to run it on, chosen from
  ``place.available()`` (ready instances with room, least loaded first) once there is one;
- ``deliver(batch, outcomes)``: the batch ran; answer its callers (one outcome per request);
- ``requeue(batch)``: the batch never reached its worker; put its requests back first in line.

This module's ``PriorityQueues`` holds queued requests by priority level (Triton's
``priority_levels``; a model without them has one level) and applies each level's queue
policy: ``max_queue_size`` refuses with Triton's UNAVAILABLE "Exceeds maximum queue size",
which clients treat as "retry later"; a request that waited past its timeout is failed
(REJECT: Triton's UNAVAILABLE "Request timeout expired") or served after the requests of its
level that have not timed out (DELAY). Requests whose callers gave up (cancelled,
disconnected) do not count. Without ``dynamic_batching`` it is Triton's default scheduler: one
request per ``execute``, in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pbd.batching_policy import BatchingPolicy, QueuePolicy
from pbd.errors import PbdError, rejected
from pbd.types import InferResult
from pbd.validation import PreparedRequest

if TYPE_CHECKING:
    from pbd.instances.instance import Instance

TIMEOUT_EXPIRED = "Request timeout expired"
# How long a scheduler sleeps between looks when nothing told it the queue or the instances
# changed (a restarted worker, a sequence gone idle).
IDLE_RECHECK_S = 0.1


class Placement(Protocol):
    def available(self) -> list[Instance]:
        """Ready instances with room for another batch, least loaded first."""
        ...

    def instance_names(self) -> list[str]:
        """Every instance that runs or will run again (restarting ones included)."""
        ...

    async def wait_capacity(self) -> None:
        """Return when an instance may have room (or after a short while)."""
        ...


@dataclass(eq=False)  # one request is equal only to itself
class WorkItem:
    prepared: PreparedRequest
    future: asyncio.Future[InferResult]
    enqueued_at: float = 0.0
    level: int = 0
    deadline: float = float("inf")  # loop time past which it has timed out
    timer: asyncio.TimerHandle | None = None


@dataclass
class Batch:
    instance: Instance
    items: list[WorkItem]
    ordinal: int = 0  # dispatch order, for preserve_ordering


def request_batch_size(prepared: PreparedRequest, max_batch_size: int) -> int:
    """The batch dimension a request adds to an execute (1 for a model without batching)."""
    if max_batch_size <= 0 or not prepared.inputs:
        return 1
    shape = prepared.inputs[0].shape
    return shape[0] if shape else 1


def answer(item: WorkItem, outcome: InferResult | PbdError) -> None:
    """Settle a request's future; a result nobody waits for gives its memory back."""
    if item.timer is not None:
        item.timer.cancel()
    if item.future.done():
        if isinstance(outcome, InferResult):
            outcome.release()
    elif isinstance(outcome, PbdError):
        item.future.set_exception(outcome)
    else:
        item.future.set_result(outcome)


@dataclass
class _Level:
    policy: QueuePolicy
    waiting: deque[WorkItem] = field(default_factory=deque)
    delayed: deque[WorkItem] = field(default_factory=deque)  # timed out, timeout_action DELAY

    def live(self) -> int:
        return sum(not i.future.done() for i in itertools.chain(self.waiting, self.delayed))

    def over(self, limit: int) -> bool:
        """Holds ``limit`` requests whose callers still wait (abandoned ones are dropped)."""
        if len(self.waiting) + len(self.delayed) < limit:
            return False
        for queue in (self.waiting, self.delayed):
            kept = [i for i in queue if not i.future.done()]
            queue.clear()
            queue.extend(kept)
        return len(self.waiting) + len(self.delayed) >= limit


class PriorityQueues:
    def __init__(self, name: str, policy: BatchingPolicy) -> None:
        self.name = name  # "model 'x' version 1", for the message of a full queue
        self.policy = policy
        self._levels: dict[int, _Level] = {}
        for level in range(1, policy.levels + 1) if policy.levels else (0,):
            self._levels[level] = _Level(policy.policy_of(level))
        self._changed = asyncio.Event()
        self._ordinals = itertools.count()

    @property
    def max_size(self) -> int:
        return self.policy.default_policy.max_queue_size

    def __len__(self) -> int:
        return sum(level.live() for level in self._levels.values())

    def submit(self, prepared: PreparedRequest) -> asyncio.Future[InferResult]:
        """Queue a request; raises UNAVAILABLE when its level's queue is full."""
        level_no = self.policy.level_of(prepared.priority)
        level = self._levels[level_no]
        limit = level.policy.max_queue_size
        if limit and level.over(limit):
            raise rejected(
                f"Exceeds maximum queue size: {self.name} already has {level.live()} requests "
                f"waiting (max_queue_size {limit})"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferResult] = loop.create_future()
        item = WorkItem(prepared, future, loop.time(), level_no)
        timeout_us = level.policy.timeout_us(prepared.timeout_us)
        if timeout_us:
            item.deadline = item.enqueued_at + timeout_us / 1e6
            if not level.policy.delay_on_timeout:
                item.timer = loop.call_at(item.deadline, self._expire, item)
        level.waiting.append(item)
        self._changed.set()
        return future

    def _expire(self, item: WorkItem) -> None:
        item.timer = None
        if not item.future.done():
            item.future.set_exception(rejected(TIMEOUT_EXPIRED))

    def in_order(self) -> Iterator[WorkItem]:
        """Queued requests in the order they are served: level 1 first; in a level, arrival
        order, then the ones delayed by their timeout. Abandoned ones are dropped here."""
        now = asyncio.get_running_loop().time()
        for level in self._levels.values():
            self._move_timed_out(level, now)
            for queue in (level.waiting, level.delayed):
                while queue and queue[0].future.done():
                    queue.popleft()
                yield from (i for i in queue if not i.future.done())

    @staticmethod
    def _move_timed_out(level: _Level, now: float) -> None:
        if not level.policy.delay_on_timeout:
            return
        expired = [i for i in level.waiting if i.deadline <= now]
        if expired:
            gone = set(map(id, expired))
            kept = [i for i in level.waiting if id(i) not in gone]
            level.waiting.clear()
            level.waiting.extend(kept)
            level.delayed.extend(expired)

    def take(self, items: list[WorkItem]) -> None:
        """Remove ``items`` (just returned by ``in_order``, which stops there) from their
        queues: they are being dispatched, so their queue timeouts no longer apply."""
        for item in items:
            if item.timer is not None:
                item.timer.cancel()
                item.timer = None
            level = self._levels[item.level]
            queue = level.waiting if item in level.waiting else level.delayed
            if queue[0] is item:
                queue.popleft()
            else:
                queue.remove(item)

    def requeue(self, batch: Batch) -> None:
        """Put back, first in line, the requests of a batch that never reached its worker."""
        for item in reversed(batch.items):
            self._levels[item.level].waiting.appendleft(item)
        self._changed.set()

    def deliver(self, batch: Batch, outcomes: list[InferResult | PbdError]) -> None:
        for item, outcome in zip(batch.items, outcomes, strict=True):
            answer(item, outcome)
        self._changed.set()

    def next_ordinal(self) -> int:
        return next(self._ordinals)

    async def wait_changed(self, timeout: float = IDLE_RECHECK_S) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def _all(self) -> Iterator[WorkItem]:
        for level in self._levels.values():
            yield from itertools.chain(level.waiting, level.delayed)

    def fail_older_than(self, when: float, error: PbdError) -> int:
        """Fail queued requests that arrived before ``when``; how many there were."""
        failed = 0
        for item in list(self._all()):
            if item.enqueued_at < when and not item.future.done():
                answer(item, error)
                failed += 1
        return failed

    def fail_all(self, error: PbdError) -> None:
        self.fail_older_than(float("inf"), error)
        for level in self._levels.values():
            level.waiting.clear()
            level.delayed.clear()

    async def next_batch(self, place: Placement) -> Batch:
        """One request at a time, as Triton's default scheduler."""
        while True:
            head = next(self.in_order(), None)
            if head is None:
                await self.wait_changed()
                continue
            instances = place.available()
            if not instances:
                await place.wait_capacity()
                continue
            self.take([head])
            return Batch(instances[0], [head], self.next_ordinal())


class RequestQueue(PriorityQueues):
    """Triton's default scheduler, bounded by ``max_size`` (0: unbounded)."""

    def __init__(self, name: str = "", max_size: int = 0) -> None:
        super().__init__(name, BatchingPolicy(default_policy=QueuePolicy(max_size)))


async def wait_result(future: asyncio.Future[InferResult]) -> InferResult:
    """Await a submitted request; if the caller is cancelled after the result arrived, the
    result's shared memory is still handed back."""
    try:
        return await future
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            future.result().release()
        raise
