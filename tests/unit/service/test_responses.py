"""ResponseStream: the daemon-side queue of one request's responses."""

from __future__ import annotations

import asyncio

from pbd.errors import Code, PbdError
from pbd.responses import BacklogFull, ResponseStream, StreamResult
from pbd.types import InferResult


def _result(released):
    return InferResult("m", "1", "r", [], _release=lambda: released.append(1))


def test_items_in_order_until_final():
    async def run():
        stream = ResponseStream()
        released = []
        stream.put(StreamResult(result=_result(released)))
        stream.put(StreamResult(result=_result(released), final=True))
        stream.put(StreamResult(result=_result(released)))  # after the final: released
        items = [item async for item in stream]
        return items, released

    items, released = asyncio.run(run())
    assert [item.final for item in items] == [False, True]
    assert released == [1]


def test_a_consumer_waits_for_the_producer():
    async def run():
        stream = ResponseStream()

        async def produce():
            await asyncio.sleep(0)
            stream.put(StreamResult())
            await asyncio.sleep(0)
            stream.put(StreamResult(final=True))

        task = asyncio.create_task(produce())
        items = [item async for item in stream]
        await task
        return items

    assert [i.final for i in asyncio.run(run())] == [False, True]


def test_fail_ends_the_stream_once():
    async def run():
        stream = ResponseStream()
        done = []
        stream.on_done(lambda: done.append(1))
        stream.fail(PbdError(Code.UNAVAILABLE, "gone"))
        stream.fail(PbdError(Code.INTERNAL, "ignored"))
        stream.on_done(lambda: done.append(2))  # already finished: runs now
        return [item async for item in stream], done

    items, done = asyncio.run(run())
    assert len(items) == 1 and items[0].error.message == "gone" and items[0].final
    assert done == [1, 2]


def test_closed_stream_releases_what_comes():
    async def run():
        stream = ResponseStream()
        released = []
        stream.put(StreamResult(result=_result(released)))
        stream.close()
        stream.put(StreamResult(result=_result(released), final=True))
        return released, stream.finished

    released, finished = asyncio.run(run())
    assert released == [1, 1] and finished


def test_last_keeps_the_last_response():
    async def run():
        stream = ResponseStream()
        released = []
        stream.put(StreamResult(result=_result(released)))
        stream.put(StreamResult(result=InferResult("m", "1", "second", [])))
        stream.put(StreamResult(final=True))
        return await stream.last(), released

    last, released = asyncio.run(run())
    assert last.id == "second" and released == [1]


def test_last_of_nothing_is_an_error():
    async def run():
        stream = ResponseStream()
        stream.put(StreamResult(final=True))
        return await stream.last()

    assert isinstance(asyncio.run(run()), PbdError)


def test_first_answers_with_the_first_response_and_releases_the_rest():
    async def run():
        stream = ResponseStream()
        released = []
        stream.put(StreamResult(result=InferResult("m", "1", "first", [])))
        stream.put(StreamResult(result=_result(released)))
        stream.put(StreamResult(error=PbdError(Code.INTERNAL, "after"), final=True))
        return await stream.first(), released

    first, released = asyncio.run(run())
    assert first.id == "first" and released == [1]


def test_first_and_last_of_a_response_then_an_error():
    # A default-mode model that answered twice: ModelInfer (last) gets the error, a stream
    # (first) the response, as Triton's front ends answer.
    async def run(pick):
        stream = ResponseStream()
        released = []
        stream.put(StreamResult(result=_result(released)))
        stream.put(StreamResult(error=PbdError(Code.INTERNAL, "got 2"), final=True))
        answer = await (stream.first() if pick == "first" else stream.last())
        return answer, released

    answer, released = asyncio.run(run("last"))
    assert isinstance(answer, PbdError) and released == [1]
    answer, released = asyncio.run(run("first"))
    assert isinstance(answer, InferResult) and released == []
    with_nothing = ResponseStream()
    with_nothing.put(StreamResult(final=True))
    assert isinstance(asyncio.run(with_nothing.first()), PbdError)


def test_a_full_backlog_names_the_setting_that_bounds_it() -> None:
    full = BacklogFull(3_000_000, 1 << 20, "--grpc-stream-buffer-bytes")
    assert str(full) == (
        "the client reads too slowly: 3000000 bytes of responses would wait to be sent, past "
        "the limit of 1048576 (--grpc-stream-buffer-bytes); the request was cancelled"
    )


def test_a_listener_takes_each_item_where_it_is_put():
    """With a listener (InferRequest.on_response) nothing waits for the consumer's turn: the
    listener has the item when put returns, and the consumer's iteration just ends."""

    async def run():
        taken = []
        stream = ResponseStream(taken.append)
        stream.put(StreamResult())
        assert len(taken) == 1  # before any loop turn
        stream.put(StreamResult(final=True))
        items = [item async for item in stream]
        return taken, items

    taken, items = asyncio.run(run())
    assert [item.final for item in taken] == [False, True]
    assert items == []


def test_what_the_listener_raises_ends_the_consumer_and_later_results_are_released():
    async def run():
        released = []
        refused = PbdError(Code.RESOURCE_EXHAUSTED, "the client reads too slowly")

        def listener(item):
            if item.result is not None:
                raise refused

        stream = ResponseStream(listener)
        stream.put(StreamResult())
        stream.put(StreamResult(result=_result(released)))  # raises: released, ends the consumer
        stream.put(StreamResult(result=_result(released)))  # queued for a consumer that leaves
        try:
            async for _ in stream:
                raise AssertionError("the consumer got an item after the listener raised")
        except PbdError as exc:
            raised = exc
        stream.close()
        return raised, released, refused

    raised, released, refused = asyncio.run(run())
    assert raised is refused
    assert released == [1, 1]


def test_the_last_error_put_is_kept_for_the_statistics():
    stream = ResponseStream(lambda item: None)
    stream.put(StreamResult(error=PbdError(Code.INTERNAL, "first")))
    stream.put(StreamResult(error=PbdError(Code.UNAVAILABLE, "gone"), final=True))
    assert stream.error is not None and stream.error.message == "gone"


def test_on_first_is_called_once_at_the_first_response_with_outputs_or_an_error():
    """The first-response histogram's observation: not for a bare final flag, not for what
    comes after the consumer left, once for the rest."""
    calls = []
    stream = ResponseStream(lambda item: None)
    stream.on_first = lambda: calls.append(1)
    stream.put(StreamResult())  # neither outputs nor an error
    assert calls == []
    stream.put(StreamResult(error=PbdError(Code.INTERNAL, "failed")))
    stream.put(StreamResult(result=_result([])))
    assert calls == [1]
    left = ResponseStream()
    left.on_first = lambda: calls.append(2)
    left.close()
    left.put(StreamResult(result=_result([]), final=True))
    assert calls == [1] and left.finished
