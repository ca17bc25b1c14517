"""The dynamic batcher and its queues, without processes: batches formed, priorities, queue
policies and ordered answers (see tests/integration/test_batching.py for the real daemon)."""

from __future__ import annotations

import asyncio

import pytest
from scheduling_samples import Place, ids, prepared, result

from pbd.batching import DynamicBatcher, gather
from pbd.batching_policy import BatchingPolicy, QueuePolicy, batching_policy
from pbd.errors import Code, PbdError
from pbd.repository.config import parse_model_config
from pbd.scheduler import TIMEOUT_EXPIRED, Batch, RequestQueue, WorkItem

# Long enough that nothing in these tests reaches it unless the test waits for it on purpose.
FOREVER_US = 600_000_000


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_gather_sums_batch_dims_and_stops_at_what_does_not_fit() -> None:
    policy = BatchingPolicy(max_batch_size=4, preferred=(2,))
    loop = asyncio.new_event_loop()
    try:
        items = [
            WorkItem(p, loop.create_future())
            for p in (prepared(0), prepared(1), prepared(2, batch=3))
        ]
    finally:
        loop.close()
    batch, closed, best = gather(items, policy)
    assert ids(batch) == ["0", "1"] and closed and best is not None and ids(best) == ["0", "1"]
    odd = [items[0], WorkItem(prepared(9, dims=(3,)), items[0].future)]
    batch, closed, _ = gather(odd, policy)
    assert ids(batch) == ["0"] and closed  # another shape past the batch dim: not together


def test_a_full_batch_goes_at_once_despite_a_long_delay() -> None:
    async def scenario() -> list[str]:
        batcher = DynamicBatcher("m", BatchingPolicy(max_batch_size=3, max_delay_us=FOREVER_US))
        for i in range(3):
            batcher.submit(prepared(i))
        batch = await asyncio.wait_for(batcher.next_batch(Place("a")), 5)
        return ids(batch.items)

    assert run(scenario()) == ["0", "1", "2"]


def test_without_delay_what_is_queued_goes() -> None:
    async def scenario() -> tuple[list[str], int]:
        batcher = DynamicBatcher("m", BatchingPolicy(max_batch_size=8, preferred=(8,)))
        batcher.submit(prepared(0))
        batcher.submit(prepared(1, batch=2))
        batch = await batcher.next_batch(Place("a"))
        return ids(batch.items), len(batcher)

    assert run(scenario()) == (["0", "1"], 0)


def test_a_partial_batch_waits_for_more_within_the_delay() -> None:
    async def scenario() -> list[str]:
        batcher = DynamicBatcher("m", BatchingPolicy(max_batch_size=2, max_delay_us=FOREVER_US))
        batcher.submit(prepared(0))
        waiting = asyncio.ensure_future(batcher.next_batch(Place("a")))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        batcher.submit(prepared(1))
        return ids((await asyncio.wait_for(waiting, 5)).items)

    assert run(scenario()) == ["0", "1"]


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


def test_preserve_ordering_holds_a_later_batch_until_the_earlier_one_is_answered() -> None:
    async def scenario() -> None:
        policy = BatchingPolicy(max_batch_size=1, preserve_ordering=True)
        batcher = DynamicBatcher("m", policy)
        futures = [batcher.submit(prepared(i)) for i in range(2)]
        place = Place("a", "b")
        first, second = [await batcher.next_batch(place) for _ in range(2)]
        batcher.deliver(second, [result("1")])
        assert not futures[1].done()
        batcher.deliver(first, [result("0")])
        assert [f.result().id for f in futures] == ["0", "1"]

    run(scenario())


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


def test_policy_from_config_text() -> None:
    config = parse_model_config(
        """
        backend: "python"
        max_batch_size: 8
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        dynamic_batching {
          max_queue_delay_microseconds: 100
          priority_levels: 2
          default_priority_level: 2
          default_queue_policy { max_queue_size: 5 }
          priority_queue_policy {
            key: 1 value { timeout_action: DELAY default_timeout_microseconds: 7 }
          }
        }
        """,
        model_name="m",
        source="config.pbtxt",
    )
    policy = batching_policy(config, fallback_queue_size=99)
    assert policy is not None
    assert (policy.max_batch_size, policy.preferred, policy.max_delay_us) == (8, (8,), 100)
    assert policy.level_of(0) == 2 and policy.level_of(1) == 1
    assert policy.policy_of(1) == QueuePolicy(0, 7, False, True)
    assert policy.policy_of(2).max_queue_size == 5
