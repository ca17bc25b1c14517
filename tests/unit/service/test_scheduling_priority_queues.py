"""Priority levels, queue policies and Triton's default scheduler, without processes; counting
and failing queued requests, which every scheduler shares."""

from __future__ import annotations

import asyncio

import pytest
from scheduling_samples import Place, ids, prepared

from pbd.errors import Code, PbdError, unavailable
from pbd.scheduling.dynamic_batcher import DynamicBatcher
from pbd.scheduling.priority_queues import TIMEOUT_EXPIRED, PriorityQueues, RequestQueue
from pbd.scheduling.scheduler import Batch, Scheduler
from pbd.scheduling.sequence_batcher import SequenceBatcher
from pbd.types import SEQUENCE_START, PreparedRequest
from pbd_wire.batching import BatchingPolicy, QueuePolicy


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_higher_priority_level_goes_first_and_zero_means_the_default() -> None:
    async def scenario() -> list[list[str]]:
        policy = BatchingPolicy(max_batch_size=1, levels=3, default_level=2)
        batcher = DynamicBatcher("m", policy)
        batcher.submit(prepared(0, priority=3))
        batcher.submit(prepared(1))  # level 2
        batcher.submit(prepared(2, priority=1))
        batcher.submit(prepared(3, priority=7))  # past the levels: level 2
        place = Place("a")
        return [ids((await batcher.next_batch(place)).items) for _ in range(4)]

    assert run(scenario()) == [["2"], ["1"], ["3"], ["0"]]


def test_max_queue_size_is_per_level_with_tritons_message() -> None:
    async def scenario() -> PbdError:
        policy = BatchingPolicy(
            max_batch_size=4,
            levels=2,
            default_level=2,
            level_policies={1: QueuePolicy(max_queue_size=1)},
        )
        batcher = DynamicBatcher("model 'm' version 1", policy)
        batcher.submit(prepared(0, priority=1))
        batcher.submit(prepared(1, priority=2))  # another level: room
        with pytest.raises(PbdError) as caught:
            batcher.submit(prepared(2, priority=1))
        return caught.value

    error = run(scenario())
    assert isinstance(error, PbdError) and error.code is Code.UNAVAILABLE
    assert error.message.startswith("Exceeds maximum queue size")


def test_a_request_timeout_rejects_only_with_allow_timeout_override() -> None:
    async def scenario() -> tuple[str, bool]:
        policy = BatchingPolicy(max_batch_size=4, default_policy=QueuePolicy(0, 0, True))
        batcher = DynamicBatcher("m", policy)
        short = batcher.submit(prepared(0, timeout_us=1000))
        plain = batcher.submit(prepared(1))
        with pytest.raises(PbdError) as caught:
            await asyncio.wait_for(short, 5)
        return caught.value.message, plain.done()

    assert run(scenario()) == (TIMEOUT_EXPIRED, False)
    assert QueuePolicy(0, 5000, False).timeout_us(10) == 5000  # no override
    assert QueuePolicy(0, 5000, True).timeout_us(9000) == 5000  # may only shorten it


def test_timeout_action_delay_serves_timed_out_requests_after_the_others() -> None:
    async def scenario() -> list[list[str]]:
        policy = BatchingPolicy(max_batch_size=1, default_policy=QueuePolicy(0, 0, True, True))
        batcher = DynamicBatcher("m", policy)
        batcher.submit(prepared(0, timeout_us=1000))
        await asyncio.sleep(0.01)
        batcher.submit(prepared(1))
        place = Place("a")
        return [ids((await batcher.next_batch(place)).items) for _ in range(2)]

    assert run(scenario()) == [["1"], ["0"]]


def test_the_default_scheduler_sends_one_request_at_a_time_and_requeues_first() -> None:
    async def scenario() -> list[str]:
        queue = RequestQueue("m", 0)
        for i in range(2):
            queue.submit(prepared(i, batch=1))
        place = Place("a")
        batch = await queue.next_batch(place)
        queue.requeue(Batch(batch.instance, batch.items))  # never reached the worker
        return [ids((await queue.next_batch(place)).items)[0] for _ in range(2)]

    assert run(scenario()) == ["0", "1"]


def test_a_full_queue_refuses_and_cancelled_requests_do_not_count():
    async def scenario() -> None:
        queue = RequestQueue("model 'm' version 1", max_size=2)
        prepared = PreparedRequest(request=None, inputs=[], requested_outputs=[])  # type: ignore[arg-type]
        first = queue.submit(prepared)
        queue.submit(prepared)
        with pytest.raises(PbdError) as info:
            queue.submit(prepared)
        assert info.value.code is Code.UNAVAILABLE
        assert info.value.message == (
            "Exceeds maximum queue size: model 'm' version 1 already has 2 requests waiting "
            "(max_queue_size 2)"
        )
        first.cancel()  # its caller gave up: there is room again
        queue.submit(prepared)
        assert len(queue) == 2
        with pytest.raises(PbdError):
            queue.submit(prepared)
        unbounded = RequestQueue()
        for _ in range(100):
            unbounded.submit(prepared)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["default", "sequence"])
def test_failing_queued_requests_older_than_a_time_and_all_of_them(kind: str) -> None:
    """Written once for every scheduler: the sequence batcher keeps its requests per sequence."""

    async def scenario() -> None:
        queue: Scheduler[object] = (
            RequestQueue("m")
            if kind == "default"
            else SequenceBatcher("m", "m", BatchingPolicy(4), 600_000_000)
        )
        flags = {"flags": SEQUENCE_START} if kind == "sequence" else {}
        old = [queue.submit(prepared(i, correlation_id=i + 1, **flags)) for i in range(2)]
        cutoff = asyncio.get_running_loop().time()
        await asyncio.sleep(0.01)
        new = queue.submit(prepared(2, correlation_id=3, **flags))
        old[0].cancel()  # abandoned: neither counted nor failed
        assert len(queue) == 2
        assert queue.fail_older_than(cutoff + 0.001, unavailable("gone")) == 1
        with pytest.raises(PbdError, match="gone"):
            old[1].result()
        assert not new.done() and len(queue) == 1
        queue.fail_all(unavailable("stopped"))
        with pytest.raises(PbdError, match="stopped"):
            new.result()
        assert len(queue) == 0

    run(scenario())


def test_pop_head_serves_levels_in_order_skips_abandoned_requests_and_stops_their_timers() -> None:
    async def scenario() -> tuple[list[str | None], bool]:
        policy = BatchingPolicy(
            max_batch_size=1, levels=2, default_level=2,
            default_policy=QueuePolicy(0, 0, True),
        )  # fmt: skip
        queue: PriorityQueues[object] = PriorityQueues("m", policy)
        queue.submit(prepared(0, priority=2, timeout_us=60_000_000))
        gone = queue.submit(prepared(1, priority=1))
        queue.submit(prepared(2, priority=1))
        gone.cancel()  # its caller gave up
        first = queue.pop_head()
        second = queue.pop_head()
        order = [item.prepared.request.id if item else None for item in (first, second)]
        order.append(None if queue.pop_head() is None else "more")
        assert second is not None
        return order, second.timer is None

    assert run(scenario()) == (["2", "0", None], True)


def test_pop_head_with_timeout_action_delay_serves_timed_out_requests_last() -> None:
    async def scenario() -> list[str]:
        policy = BatchingPolicy(max_batch_size=1, default_policy=QueuePolicy(0, 0, True, True))
        queue: PriorityQueues[object] = PriorityQueues("m", policy)
        queue.submit(prepared(0, timeout_us=1000))
        await asyncio.sleep(0.01)
        queue.submit(prepared(1))
        items = [queue.pop_head(), queue.pop_head()]
        return [item.prepared.request.id for item in items if item is not None]

    assert run(scenario()) == ["1", "0"]
