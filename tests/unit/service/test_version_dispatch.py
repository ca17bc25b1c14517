"""The dispatch without processes: fake instances whose ``execute`` the test finishes by hand.

Granted (the default scheduler): a free instance is taken at once; otherwise the request waits
and the room an instance gives back (``on_capacity``) is granted to the head of the queue.
Batched (the dynamic batcher): the dispatcher task forms batches and runs them. The real
instances and worker are in tests/integration (test_models, test_batching, test_overload).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from scheduling_samples import prepared

from pbd.errors import Code, PbdError
from pbd.instance.instance import Instance
from pbd.instance.records import InstancePlan, NotSent, State
from pbd.scheduling.dynamic_batcher import DynamicBatcher
from pbd.scheduling.priority_queues import TIMEOUT_EXPIRED, PriorityQueues, RequestQueue
from pbd.scheduling.scheduler import Scheduler
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.types import InferResult, PreparedRequest
from pbd.version.dispatch import Dispatch
from pbd.version.supervisor import Slot, Supervisor
from pbd_wire.batching import BatchingPolicy, QueuePolicy

WAIT_S = 5.0  # a bound on a test that went wrong, never reached when it passes


@dataclass
class Room:
    """The part of ``pbd.instance.inflight.InFlightBatches`` the dispatch uses: room taken,
    and the batches whose callers gave up after the queue's grant sent them."""

    inflight: int = 0
    abandoned: int = 0

    def abandon(self, batch_id: int, flight: object) -> None:
        self.abandoned += 1  # as the real one: the room stays taken until the result comes


class FakeInstance:
    """What the dispatch reads of an instance, and batches that wait for ``finish``.

    As the real one, it gives its room back (``batches.inflight``, then ``on_capacity``) when
    the result comes, or when it raises NotSent. ``execute`` runs a batch in the caller's
    task; ``send`` is what the queue's grant uses to send one itself (``Dispatch._hand_off``),
    its result answering the future the request's task waits on."""

    execute_timeout = 0.0

    def __init__(self, name: str) -> None:
        self.plan = InstancePlan(name, "CPU", 0)
        self.version = 1
        self.state = State.READY
        self.draining = False
        self.batches = Room()
        self.calling = 0  # BLS calls its worker waits on
        self.warming = False
        self.reason = ""
        self.on_capacity: Callable[[], None] = lambda: None
        self.not_sent = False  # the next execute finds the connection closed
        self.ran: list[list[str]] = []  # request ids of each execute, in call order
        # Each batch running: the future its result answers.
        self._results: list[asyncio.Future[None]] = []

    def describe(self) -> str:
        return f"instance '{self.plan.name}'"

    def send(
        self,
        batch: list[PreparedRequest],
        in_order: bool = True,
        future: asyncio.Future[None] | None = None,
    ) -> tuple[int, list[str]]:
        if self.not_sent:
            self.draining = True
            self._give_back()
            raise NotSent(Code.UNAVAILABLE, f"worker for {self.describe()} closed")
        ids = [p.request.id for p in batch]
        self.ran.append(ids)
        if future is None:
            future = asyncio.get_running_loop().create_future()
        self._results.append(future)
        return len(self.ran), ids

    async def outcomes(self, flight: list[str], result: object) -> list[InferResult | PbdError]:
        return [InferResult("m", "1", f"{i}@{self.plan.name}", []) for i in flight]

    async def execute(
        self, batch: list[PreparedRequest], in_order: bool = True
    ) -> list[InferResult | PbdError]:
        _batch_id, ids = self.send(batch, in_order)
        await self._results[-1]
        return await self.outcomes(ids, None)

    def finish(self) -> None:
        """The worker answers the oldest batch still running here: its room comes back
        there and then, whether its caller still waits or not (as the real instance's)."""
        done = self._results.pop(0)
        if not done.done():
            done.set_result(None)
        self._give_back()

    @property
    def running(self) -> int:
        return len(self._results)

    @property
    def inflight(self) -> int:
        return self.batches.inflight

    def _give_back(self) -> None:
        self.batches.inflight -= 1
        self.on_capacity()


def make_dispatch(
    queue: Scheduler[FakeInstance], *names: str, depth: int = 1
) -> tuple[Dispatch, list[FakeInstance]]:
    """A dispatch over a real supervisor whose slots hold fake instances."""
    settings = Settings(worker_pipeline_depth=depth)
    instances = [FakeInstance(n) for n in names]

    def new_instance(plan: InstancePlan) -> Instance:
        raise AssertionError("the dispatch starts no instance")

    supervisor = Supervisor("m/1", settings, new_instance, lambda reason: None)
    supervisor.slots.extend(Slot(i.plan, i) for i in instances)  # type: ignore[arg-type]
    dispatch = Dispatch(
        "m/1",
        queue,  # type: ignore[arg-type]  # FakeInstance stands for Instance
        supervisor,
        ModelStats(),
        settings,
    )
    for instance in instances:
        instance.on_capacity = dispatch.on_capacity
    return dispatch, instances


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_S))


async def stop(dispatch: Dispatch) -> None:
    """Stop the dispatcher task; one that ignores its cancellation fails the test (waited for
    with asyncio.wait, which, unlike wait_for, cancels nothing itself)."""
    stopping = asyncio.ensure_future(dispatch.stop())
    done, _ = await asyncio.wait({stopping}, timeout=WAIT_S)
    assert done, "the dispatcher task did not end when cancelled"


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (a few iterations; no wall clock)."""
    while not condition():
        await asyncio.sleep(0)


def infer(dispatch: Dispatch, ident: int, **kw: object) -> asyncio.Task[InferResult]:
    return asyncio.ensure_future(dispatch.infer(prepared(ident, **kw)))


async def one_busy(
    queue: Scheduler[FakeInstance], waiting: int
) -> tuple[Dispatch, FakeInstance, asyncio.Task[InferResult], list[asyncio.Task[InferResult]]]:
    """One instance (depth 1) running request 0, and requests 1..``waiting`` queued."""
    dispatch, (a,) = make_dispatch(queue, "a")
    busy = infer(dispatch, 0)
    await until(lambda: a.running == 1)
    queued = [infer(dispatch, i) for i in range(1, waiting + 1)]
    await until(lambda: len(queue) == waiting)
    return dispatch, a, busy, queued


def test_a_free_instance_is_taken_at_once_least_loaded_first() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a, b) = make_dispatch(queue, "a", "b", depth=2)
        first = infer(dispatch, 0)
        await until(lambda: a.running == 1)
        second = infer(dispatch, 1)
        await until(lambda: b.running == 1)  # b had no work: it takes the second
        assert queue.empty() and (a.inflight, b.inflight) == (1, 1)
        a.finish()
        b.finish()
        assert (await first).id == "0@a" and (await second).id == "1@b"
        assert (a.inflight, b.inflight) == (0, 0)

    run(scenario)


def test_an_instance_waiting_on_its_own_bls_call_counts_as_busy() -> None:
    """Its worker is in execute() (for a request a front end sent it directly, which the
    daemon does not count): the call it made goes to the other instance, not behind it."""

    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a, b) = make_dispatch(queue, "a", "b", depth=2)
        a.calling = 1
        call = infer(dispatch, 0)
        await until(lambda: b.running == 1)
        assert a.running == 0
        b.finish()
        assert (await call).id == "0@b"

    run(scenario)


def test_an_instance_running_its_warmup_takes_no_request() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a, b) = make_dispatch(queue, "a", "b", depth=2)
        a.warming = True  # the less loaded, but not ready for requests yet
        first = infer(dispatch, 0)
        second = infer(dispatch, 1)
        await until(lambda: b.running == 2)
        assert a.running == 0 and a.inflight == 0
        b.finish()
        b.finish()
        assert [(await first).id, (await second).id] == ["0@b", "1@b"]

    run(scenario)


def test_when_all_are_full_requests_wait_and_are_granted_in_queue_order() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        _, a, busy, queued = await one_busy(queue, 2)
        for expected in (["0"], ["0", "1"], ["0", "1", "2"]):
            await until(lambda: a.running == 1)
            assert [ids[0] for ids in a.ran] == expected
            assert a.inflight == 1  # depth 1: never more than one here
            a.finish()
        assert [(await t).id for t in (busy, *queued)] == ["0@a", "1@a", "2@a"]
        assert a.inflight == 0 and queue.empty()

    run(scenario)


def test_a_caller_cancelled_while_waiting_takes_no_room() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        _, a, busy, (gone, waiting) = await one_busy(queue, 2)
        gone.cancel()
        a.finish()
        await busy
        with pytest.raises(asyncio.CancelledError):
            await gone
        await until(lambda: a.running == 1)
        assert a.ran == [["0"], ["2"]] and a.inflight == 1
        a.finish()
        assert (await waiting).id == "2@a" and a.inflight == 0

    run(scenario)


def test_the_grant_sends_the_head_of_the_queue_itself_and_its_task_wakes_for_the_result() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, a, busy, (sent, waiting) = await one_busy(queue, 2)
        a.finish()
        # The result gives a's room back, and the grant sends request 1 there at once, in
        # the same turn: no task of request 1 has run since.
        assert a.ran == [["0"], ["1"]] and a.inflight == 1 and len(queue) == 1
        assert not sent.done()
        a.finish()
        assert (await sent).id == "1@a"
        await busy
        a.finish()
        assert (await waiting).id == "2@a" and a.inflight == 0
        assert dispatch._sent == {}
        assert dispatch.stats.queue.count == 3  # each counted once, where it was sent

    run(scenario)


def test_a_request_the_grant_sent_whose_caller_gives_up_is_let_go_in_its_worker() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, a, busy, (gone, waiting) = await one_busy(queue, 2)
        a.finish()
        assert a.ran == [["0"], ["1"]]
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        # Abandoned there; its room is the worker's until its result comes, as ever.
        assert a.batches.abandoned == 1 and a.inflight == 1 and dispatch._sent == {}
        a.finish()
        assert a.ran == [["0"], ["1"], ["2"]]
        a.finish()
        assert (await waiting).id == "2@a" and a.inflight == 0
        await busy

    run(scenario)


def test_a_request_the_grant_could_not_send_goes_back_to_the_head_of_the_queue() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a, b) = make_dispatch(queue, "a", "b")
        busy_a, busy_b = infer(dispatch, 0), infer(dispatch, 1)
        await until(lambda: a.running == 1 and b.running == 1)
        first, second = infer(dispatch, 2), infer(dispatch, 3)
        await until(lambda: len(queue) == 2)
        a.not_sent = True  # a's worker is gone when its room comes back
        a.finish()
        assert a.draining and a.ran == [["0"]] and len(queue) == 2  # 2 is still first
        b.finish()
        assert b.ran == [["1"], ["2"]]
        b.finish()
        assert (await first).id == "2@b"
        b.finish()
        assert (await second).id == "3@b"
        await busy_a
        await busy_b

    run(scenario)


def test_a_grant_to_a_caller_that_just_gave_up_is_handed_on() -> None:
    """An instance with an execute timeout is sent its requests by their own tasks (the
    timeout is waited for there): the grant only gives the room."""

    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, a, busy, (granted, next_in_line) = await one_busy(queue, 2)
        a.execute_timeout = 60.0
        a.finish()
        # The result gives a's room back and grants it to request 1 at once...
        await until(lambda: len(queue) == 1)
        assert a.inflight == 1 and a.running == 0
        granted.cancel()  # ...whose caller gives up before its task could run it
        with pytest.raises(asyncio.CancelledError):
            await granted
        await busy
        await until(lambda: a.running == 1)
        assert a.ran == [["0"], ["2"]] and a.inflight == 1  # the room went to request 2
        a.finish()
        assert (await next_in_line).id == "2@a" and a.inflight == 0
        assert dispatch.stats.queue.count == 2  # requests 0 and 2 went to an instance

    run(scenario)


def test_a_request_not_sent_runs_on_another_instance() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a, b) = make_dispatch(queue, "a", "b")
        a.not_sent = True  # a's worker is gone; the dispatch picks a first (both idle)
        task = infer(dispatch, 0)
        await until(lambda: b.running == 1)
        b.finish()
        assert (await task).id == "0@b"
        assert a.ran == [] and (a.inflight, b.inflight) == (0, 0)

    run(scenario)


def test_not_sent_while_stopping_fails_the_request() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("m")
        dispatch, (a,) = make_dispatch(queue, "a")
        dispatch.stopping = True
        a.not_sent = True
        with pytest.raises(NotSent):
            await dispatch.infer(prepared(0))

    run(scenario)


def test_max_queue_size_still_refuses_a_waiting_request() -> None:
    async def scenario() -> None:
        queue: RequestQueue[FakeInstance] = RequestQueue("model 'm' version 1", max_size=1)
        dispatch, a, busy, (waiting,) = await one_busy(queue, 1)
        with pytest.raises(PbdError) as refused:
            await dispatch.infer(prepared(2))
        assert refused.value.code is Code.UNAVAILABLE
        assert "Exceeds maximum queue size" in refused.value.message
        a.finish()
        await busy
        await until(lambda: a.running == 1)
        a.finish()
        assert (await waiting).id == "1@a" and a.inflight == 0

    run(scenario)


class GrantingQueues(PriorityQueues[FakeInstance]):
    """A granting scheduler with a queue policy (timeouts): what the dispatch sees of it is
    the protocol, whichever scheduler it is."""

    grants = True


def test_a_queue_timeout_still_fails_a_waiting_request_and_leaks_no_room() -> None:
    async def scenario() -> None:
        policy = BatchingPolicy(
            default_policy=QueuePolicy(default_timeout_us=1000, allow_timeout_override=True)
        )
        queue = GrantingQueues("m", policy)
        dispatch, a, busy, _ = await one_busy(queue, 0)  # request 0 never queued: no timeout
        with pytest.raises(PbdError) as expired:
            await dispatch.infer(prepared(1))
        assert expired.value.code is Code.UNAVAILABLE
        assert expired.value.message == TIMEOUT_EXPIRED
        a.finish()
        await busy
        assert a.inflight == 0 and a.ran == [["0"]] and len(queue) == 0

    run(scenario)


def test_batched_schedulers_go_through_the_dispatcher_loop() -> None:
    async def scenario() -> None:
        # A delay long enough that the batch closes only once full (4 requests).
        policy = BatchingPolicy(max_batch_size=4, max_delay_us=600_000_000)
        queue: DynamicBatcher[FakeInstance] = DynamicBatcher("m", policy)
        dispatch, (a,) = make_dispatch(queue, "a")
        assert not dispatch.granted
        dispatch.start()
        try:
            tasks = [infer(dispatch, i) for i in range(4)]
            await until(lambda: a.running == 1)
            assert a.ran == [["0", "1", "2", "3"]] and a.inflight == 1
            a.finish()
            assert [(await t).id for t in tasks] == ["0@a", "1@a", "2@a", "3@a"]
            assert a.inflight == 0
        finally:
            await stop(dispatch)

    run(scenario)


def test_a_batch_not_sent_goes_back_to_the_head_of_the_queue() -> None:
    async def scenario() -> None:
        policy = BatchingPolicy(max_batch_size=2, max_delay_us=600_000_000)
        queue: DynamicBatcher[FakeInstance] = DynamicBatcher("m", policy)
        dispatch, (a, b) = make_dispatch(queue, "a", "b")
        a.not_sent = True
        dispatch.start()
        try:
            tasks = [infer(dispatch, i) for i in range(2)]
            await until(lambda: b.running == 1)
            assert b.ran == [["0", "1"]] and a.ran == []
            b.finish()
            assert [(await t).id for t in tasks] == ["0@b", "1@b"]
        finally:
            await stop(dispatch)

    run(scenario)
