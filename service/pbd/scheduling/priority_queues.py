"""Queued requests by priority level, with each level's queue policy; Triton's default
scheduler; what the dynamic and sequence batchers build on.

``PriorityQueues`` holds queued requests by priority level (Triton's ``priority_levels``; a
model without them has one level) and applies each level's queue policy: ``max_queue_size``
refuses with Triton's UNAVAILABLE "Exceeds maximum queue size", which clients treat as "retry
later"; a request that waited past its timeout is failed (REJECT: Triton's UNAVAILABLE
"Request timeout expired") or served after the requests of its level that have not timed out
(DELAY). Requests whose callers gave up (cancelled, disconnected) do not count. As it is, it
is Triton's default scheduler (a model without ``dynamic_batching``): one request per
``execute``, in arrival order.

A subclass that keeps its requests elsewhere (the sequence batcher) overrides ``_queued``,
``_forget_queued`` and ``_batch_done``; counting, answering and failing queued requests are
written once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic

from pbd.errors import PbdError, rejected
from pbd.scheduling.scheduler import Batch, InstanceT, Placement, WorkItem, answer
from pbd.types import InferResult, PreparedRequest
from pbd_wire.batching import BatchingPolicy, QueuePolicy, queue_full_message

TIMEOUT_EXPIRED = "Request timeout expired"
# How long a scheduler sleeps between looks when nothing told it the queue or the instances
# changed (a restarted worker, a sequence gone idle).
IDLE_RECHECK_S = 0.1


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


def _stop_timer(item: WorkItem) -> None:
    """The request leaves the queue: its queue timeout no longer applies."""
    if item.timer is not None:
        item.timer.cancel()
        item.timer = None


def queue_full(name: str, waiting: int, limit: int) -> PbdError:
    return rejected(queue_full_message(name, waiting, limit))


class PriorityQueues(Generic[InstanceT]):
    pipelined = True  # see Scheduler.pipelined
    grants = False  # see Scheduler.grants

    def __init__(self, name: str, policy: BatchingPolicy) -> None:
        self.name = name  # "model 'x' version 1", for the message of a full queue
        self.policy = policy
        self._levels: dict[int, _Level] = {}
        for level in range(1, policy.levels + 1) if policy.levels else (0,):
            self._levels[level] = _Level(policy.policy_of(level))
        self._changed = asyncio.Event()
        self._ordinals = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, asked for once: on Python 3.11 each asking is a getpid() call."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    @property
    def max_size(self) -> int:
        return self.policy.default_policy.max_queue_size

    def _queued(self) -> Iterator[WorkItem]:
        """Every queued request (some may have been answered already: abandoned ones)."""
        for level in self._levels.values():
            yield from itertools.chain(level.waiting, level.delayed)

    def _forget_queued(self) -> None:
        for level in self._levels.values():
            level.waiting.clear()
            level.delayed.clear()

    def __len__(self) -> int:
        return sum(not item.future.done() for item in self._queued())

    def empty(self) -> bool:
        """Nothing queued, not even requests whose callers gave up (O(levels), unlike len).
        Asked for every request: a plain loop, no generator."""
        for level in self._levels.values():  # noqa: SIM110 - no generator on the request path
            if level.waiting or level.delayed:
                return False
        return True

    def submit(self, prepared: PreparedRequest) -> asyncio.Future[InferResult]:
        """Queue a request; raises UNAVAILABLE when its level's queue is full."""
        level_no = self.policy.level_of(prepared.priority)
        level = self._levels[level_no]
        limit = level.policy.max_queue_size
        if limit and level.over(limit):
            raise queue_full(self.name, level.live(), limit)
        loop = self.loop
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
        now = self.loop.time()
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

    def pop_head(self) -> WorkItem | None:
        """The next request to serve, out of the queue (its timeout no longer applies); None
        when no caller waits."""
        for level in self._levels.values():
            if level.delayed or level.policy.delay_on_timeout:
                break  # the general order below: timed-out requests move behind the rest
            waiting = level.waiting
            while waiting:  # in arrival order; abandoned ones are dropped on the way
                item = waiting.popleft()
                if not item.future.done():
                    _stop_timer(item)
                    return item
        else:
            return None
        head = next(self.in_order(), None)
        if head is not None:
            self.take([head])
        return head

    def take(self, items: list[WorkItem]) -> None:
        """Remove ``items`` (just returned by ``in_order``, which stops there) from their
        queues: they are being dispatched, so their queue timeouts no longer apply."""
        for item in items:
            _stop_timer(item)
            level = self._levels[item.level]
            queue = level.waiting if item in level.waiting else level.delayed
            if queue[0] is item:
                queue.popleft()
            else:
                queue.remove(item)

    def requeue(self, batch: Batch[InstanceT]) -> None:
        """Put back, first in line, the requests of a batch that never reached its worker."""
        for item in reversed(batch.items):
            self._levels[item.level].waiting.appendleft(item)
        self._batch_done(batch)

    def deliver(self, batch: Batch[InstanceT], outcomes: list[InferResult | PbdError]) -> None:
        for item, outcome in zip(batch.items, outcomes, strict=True):
            answer(item, outcome)
        self._batch_done(batch)

    def _batch_done(self, batch: Batch[InstanceT]) -> None:
        """``batch`` left its instance (answered, or put back): another may be formed."""
        self._changed.set()

    def next_ordinal(self) -> int:
        return next(self._ordinals)

    async def wait_changed(self, timeout: float | None = IDLE_RECHECK_S) -> None:
        """Until the queue or its instances change, or ``timeout`` (None: no timeout, for an
        empty queue: only a submit changes that, and nothing else needs a look)."""
        self._changed.clear()
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that comes
        # as the event is set, and the dispatcher task being stopped would run on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    def fail_older_than(self, when: float, error: PbdError) -> int:
        """Fail queued requests that arrived before ``when``; how many there were."""
        failed = 0
        for item in list(self._queued()):
            if item.enqueued_at < when and not item.future.done():
                answer(item, error)
                failed += 1
        return failed

    def fail_all(self, error: PbdError) -> None:
        self.fail_older_than(float("inf"), error)
        self._forget_queued()

    async def next_batch(self, place: Placement[InstanceT]) -> Batch[InstanceT]:
        """One request at a time, as Triton's default scheduler."""
        while True:
            head = next(self.in_order(), None)
            if head is None:
                await self.wait_changed(None)  # idle: no look ten times a second
                continue
            instances = place.available()
            if not instances:
                await place.wait_capacity()
                continue
            self.take([head])
            return Batch(instances[0], [head], self.next_ordinal())


class RequestQueue(PriorityQueues[InstanceT]):
    """Triton's default scheduler, bounded by ``max_size`` (0: unbounded)."""

    grants = True

    def __init__(self, name: str = "", max_size: int = 0) -> None:
        super().__init__(name, BatchingPolicy(default_policy=QueuePolicy(max_size)))
