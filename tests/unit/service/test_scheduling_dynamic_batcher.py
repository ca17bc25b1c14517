"""The dynamic batcher without processes: batches formed within the delay, preferred sizes and
ordered answers (see tests/integration/test_batching.py for the real daemon)."""

from __future__ import annotations

import asyncio

from scheduling_samples import Place, ids, prepared, result

from pbd.scheduling.dynamic_batcher import DynamicBatcher, gather
from pbd.scheduling.scheduler import WorkItem
from pbd_wire.batching import BatchingPolicy

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


def test_an_empty_queue_is_not_looked_at_again_until_a_request_comes() -> None:
    """An idle daemon does not wake for its batchers: with nothing queued, the dispatcher
    waits for a submit, not for a timer (it used to look ten times a second)."""

    class Counting(DynamicBatcher[str]):
        looks = 0

        def in_order(self):  # type: ignore[no-untyped-def]
            Counting.looks += 1
            return super().in_order()

    async def scenario() -> tuple[int, list[str]]:
        batcher = Counting("m", BatchingPolicy(max_batch_size=2))
        waiting = asyncio.ensure_future(batcher.next_batch(Place("a")))
        await asyncio.sleep(0.35)  # three looks and more, were it still polling
        looks = Counting.looks
        batcher.submit(prepared(0))
        return looks, ids((await asyncio.wait_for(waiting, 5)).items)

    assert run(scenario()) == (1, ["0"])
