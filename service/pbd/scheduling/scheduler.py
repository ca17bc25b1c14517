"""What a model version's dispatcher sees of its scheduler, and the records they pass.

A scheduler (the default queue in ``priority_queues``, the dynamic batcher in
``dynamic_batcher``, the sequence batcher in ``sequence_batcher``; ``choice.make_scheduler``
picks one) is what the version's dispatcher talks to:

- ``submit(prepared)``: queue a request (or refuse it: full queue, bad sequence flags);
- ``await next_batch(place)``: the next batch and the instance to run it on, chosen from
  ``place.available()`` (ready instances with room, least loaded first) once there is one;
- ``deliver(batch, outcomes)``: the batch ran; answer its callers (one outcome per request);
- ``requeue(batch)``: the batch never reached its worker; put its requests back first in line;
- ``fail_older_than(when, error)`` / ``fail_all(error)``: give up on queued requests;
- ``pipelined``: whether an instance may be handed a batch before it finished the last one
  (up to ``worker_pipeline_depth``), or only once it is idle.

Schedulers know an instance only as something with a ``plan.name``: they are generic in the
instance type, so this package imports nothing of ``pbd.instance``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pbd.errors import PbdError
from pbd.types import InferResult, PreparedRequest


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Schedulable(Protocol):
    """What a scheduler needs of an instance: its name (a sequence is bound to one)."""

    @property
    def plan(self) -> _Named: ...


InstanceT = TypeVar("InstanceT", bound=Schedulable)


class Placement(Protocol[InstanceT]):
    """The dispatcher's side: which instances can take a batch."""

    def available(self) -> list[InstanceT]:
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
    # The request's InferResult; for a granting scheduler (``grants``), the instance granted
    # to it. Any: a WorkItem is not generic in the instance type, which the dispatch knows.
    future: asyncio.Future[Any]
    enqueued_at: float = 0.0
    level: int = 0
    deadline: float = float("inf")  # loop time past which it has timed out
    timer: asyncio.TimerHandle | None = None


@dataclass
class Batch(Generic[InstanceT]):
    instance: InstanceT
    items: list[WorkItem]
    ordinal: int = 0  # dispatch order, for preserve_ordering


class Scheduler(Protocol[InstanceT]):
    # An instance may be sent its next batch before the last one was answered
    # (--worker-pipeline-depth); the dynamic batcher waits, so as not to split a batch.
    pipelined: bool
    # One request per execute, in queue order: the dispatch grants an instance's room to the
    # request at the head (its future's result is the instance) and the request's own task
    # runs it; no batch is formed and ``next_batch`` is not used.
    grants: bool

    def __len__(self) -> int:
        """Queued requests whose callers still wait."""
        ...

    def submit(self, prepared: PreparedRequest) -> asyncio.Future[InferResult]: ...

    async def next_batch(self, place: Placement[InstanceT]) -> Batch[InstanceT]: ...

    def deliver(self, batch: Batch[InstanceT], outcomes: list[InferResult | PbdError]) -> None: ...

    def requeue(self, batch: Batch[InstanceT]) -> None: ...

    def fail_older_than(self, when: float, error: PbdError) -> int:
        """Fail queued requests that arrived before ``when`` (loop time); how many."""
        ...

    def fail_all(self, error: PbdError) -> None: ...

    def empty(self) -> bool:
        """Nothing queued, not even requests whose callers gave up (cheaper than len)."""
        ...

    def pop_head(self) -> WorkItem | None:
        """Granting schedulers: the next request to serve, taken out of the queue."""
        ...


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


async def wait_result(future: asyncio.Future[InferResult]) -> InferResult:
    """Await a submitted request; if the caller is cancelled after the result arrived, the
    result's shared memory is still handed back."""
    try:
        return await future
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            future.result().release()
        raise
