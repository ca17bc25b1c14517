"""The sequence batcher without processes: Triton's errors, one instance per sequence, one
request of a sequence at a time, END and idle release; iterative sequences (implicit sequence
IDs, rescheduled requests)."""

from __future__ import annotations

import asyncio

import pytest
from scheduling_samples import Place, ids, prepared, result

from pbd.errors import NOT_RESCHEDULABLE, Code, PbdError, Rescheduled
from pbd.scheduling.sequence_batcher import SequenceBatcher
from pbd.types import SEQUENCE_END, SEQUENCE_START
from pbd_wire.batching import BatchingPolicy

LONG_IDLE_US = 600_000_000


def batcher(
    max_batch_size: int = 4, idle_us: int = LONG_IDLE_US, iterative: bool = False
) -> SequenceBatcher:
    return SequenceBatcher(
        "model 'm' version 1", "m", BatchingPolicy(max_batch_size), idle_us, iterative
    )


def error_of(seq: SequenceBatcher, ident: int, **kw: object) -> PbdError:
    with pytest.raises(PbdError) as caught:
        seq.submit(prepared(ident, **kw))
    assert caught.value.code is Code.INVALID_ARG
    return caught.value


def test_tritons_errors_for_no_sequence_id_and_a_sequence_not_started() -> None:
    async def scenario() -> None:
        seq = batcher()
        assert error_of(seq, 1).message == (
            "[request id: 1] inference request to model 'm' must specify a non-zero or "
            "non-empty correlation ID"
        )
        assert error_of(seq, 2, correlation_id="").message.endswith("correlation ID")
        assert error_of(seq, 3, correlation_id=7).message == (
            "[request id: 3] inference request for sequence 7 to model 'm' must specify the "
            "START flag on the first request of the sequence"
        )

    asyncio.run(scenario())


def test_a_sequence_stays_on_its_instance_one_request_at_a_time() -> None:
    async def scenario() -> None:
        seq = batcher()
        place = Place("a", "b")
        seq.submit(prepared(0, correlation_id=1, flags=SEQUENCE_START))
        seq.submit(prepared(1, correlation_id="s", flags=SEQUENCE_START))
        seq.submit(prepared(2, correlation_id=1))
        first = await seq.next_batch(place)
        second = await seq.next_batch(place)
        assert {first.instance.name, second.instance.name} == {"a", "b"}
        assert sorted(ids(first.items) + ids(second.items)) == ["0", "1"]
        waiting = asyncio.ensure_future(seq.next_batch(place))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # request 2 waits until request 0 was answered
        done = first if ids(first.items) == ["0"] else second
        seq.deliver(done, [result("0")])
        third = await asyncio.wait_for(waiting, 5)
        assert ids(third.items) == ["2"] and third.instance is done.instance

    asyncio.run(scenario())


def test_heads_of_sequences_on_one_instance_share_an_execute() -> None:
    async def scenario() -> list[str]:
        seq = batcher()
        for key in (1, 2, 3):
            seq.submit(prepared(key, correlation_id=key, flags=SEQUENCE_START))
        return ids((await seq.next_batch(Place("only"))).items)

    assert asyncio.run(scenario()) == ["1", "2", "3"]


def test_end_and_idle_release_a_sequence() -> None:
    async def scenario() -> None:
        seq = batcher(idle_us=1000)
        place = Place("a")
        seq.submit(prepared(0, correlation_id=5, flags=SEQUENCE_START | SEQUENCE_END))
        batch = await seq.next_batch(place)
        seq.deliver(batch, [result("0")])
        error_of(seq, 1, correlation_id=5)  # ended: must START again
        seq.submit(prepared(2, correlation_id=6, flags=SEQUENCE_START))
        batch = await seq.next_batch(place)
        seq.deliver(batch, [result("2")])
        await asyncio.sleep(0.01)
        seq.submit(prepared(3, correlation_id=9, flags=SEQUENCE_START))
        await seq.next_batch(place)  # its look at the queue releases idle sequence 6
        error_of(seq, 4, correlation_id=6)

    asyncio.run(scenario())


def test_an_iterative_sequence_gives_a_request_without_an_id_one_and_the_start_flag() -> None:
    async def scenario() -> None:
        seq = batcher(iterative=True)
        seq.submit(prepared(0, correlation_id=2, flags=SEQUENCE_START))  # 2 is in use
        first, second = prepared(1), prepared(2, correlation_id="", flags=SEQUENCE_END)
        seq.submit(first)
        seq.submit(second)
        assert (first.correlation_id, first.flags) == (1, SEQUENCE_START)
        assert (second.correlation_id, second.flags) == (3, SEQUENCE_START)  # 2 skipped
        batch = await seq.next_batch(Place("a"))
        assert ids(batch.items) == ["0", "1", "2"]

    asyncio.run(scenario())


def test_a_rescheduled_request_waits_behind_the_others_and_runs_again_with_flags_0() -> None:
    async def scenario() -> None:
        seq = batcher(max_batch_size=0, iterative=True)
        place = Place("a")
        futures = [seq.submit(prepared(i)) for i in range(2)]
        batch = await seq.next_batch(place)
        assert ids(batch.items) == ["0"]
        seq.deliver(batch, [Rescheduled()])
        assert not futures[0].done()
        # Request 1 waited while 0 ran: it goes first, then 0 again.
        order = []
        for _ in range(2):
            batch = await seq.next_batch(place)
            order.append((ids(batch.items)[0], batch.items[0].prepared.flags))
            seq.deliver(batch, [result(ids(batch.items)[0])])
        assert order == [("1", SEQUENCE_START), ("0", 0)]
        assert [f.result().id for f in futures] == ["0", "1"]

    asyncio.run(scenario())


def test_an_iterative_sequence_ends_when_its_request_is_answered() -> None:
    async def scenario() -> None:
        seq = batcher(iterative=True)
        place = Place("a")
        future = seq.submit(prepared(0, correlation_id=7, flags=SEQUENCE_START | SEQUENCE_END))
        seq.deliver(await seq.next_batch(place), [Rescheduled()])
        batch = await seq.next_batch(place)  # END did not end it: its request is not done
        assert batch.items[0].prepared.flags == 0
        seq.deliver(batch, [result("0")])
        assert future.result().id == "0"
        seq.submit(prepared(1, correlation_id=8, flags=SEQUENCE_START))
        seq.deliver(await seq.next_batch(place), [result("1")])  # no END flag: ends all the same
        error_of(seq, 2, correlation_id=8)

    asyncio.run(scenario())


def test_an_abandoned_rescheduled_request_ends_its_iterative_sequence() -> None:
    async def scenario() -> None:
        seq = batcher(iterative=True)
        place = Place("a")
        future = seq.submit(prepared(0, correlation_id=4, flags=SEQUENCE_START))
        seq.deliver(await seq.next_batch(place), [Rescheduled()])
        future.cancel()  # the client gave up while it waited to run again
        seq.submit(prepared(1, correlation_id=5, flags=SEQUENCE_START))
        assert ids((await seq.next_batch(place)).items) == ["1"]
        assert len(seq) == 0
        error_of(seq, 2, correlation_id=4)

    asyncio.run(scenario())


def test_a_sequence_that_is_not_iterative_fails_a_rescheduled_request() -> None:
    async def scenario() -> None:
        seq = batcher()
        future = seq.submit(prepared(0, correlation_id=1, flags=SEQUENCE_START))
        seq.deliver(await seq.next_batch(Place("a")), [Rescheduled()])
        with pytest.raises(PbdError) as caught:
            await future
        assert (caught.value.code, caught.value.message) == (Code.INTERNAL, NOT_RESCHEDULABLE)

    asyncio.run(scenario())
