"""pbd.h2.connection against hostile clients: floods, oversize blocks, bad flow control,
clients that never read. The connection must end or refuse precisely, keep serving others,
and keep its memory bounded."""

from __future__ import annotations

import asyncio

import pytest
from h2_peer import STATUS_200, Peer, Recorder, goaway, request, run, still_serving

from pbd.h2 import frames as f
from pbd.h2.limits import DEFAULT_LIMITS

MAX_HEADER_BLOCK = DEFAULT_LIMITS.max_header_block
MAX_STREAMS = DEFAULT_LIMITS.max_streams


RESETS = DEFAULT_LIMITS.reset_rate.count


def test_resets_within_the_budget_leave_nothing_behind() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        wire = []
        for i in range(RESETS):
            stream = 1 + 2 * i
            wire += [peer.headers(stream, request()), f.rst_stream(stream, f.CANCEL)]
        peer.send(*wire)
        frames = await peer.until_ping()
        assert all(x.kind != f.GOAWAY for x in frames)
        assert len(app.handlers) == RESETS and all(h.reset for h in app.handlers.values())
        assert conns[0].core.streams == {}
        await still_serving(peer, 1 + 2 * RESETS)

    run(test)


@pytest.mark.parametrize("with_data", [False, True])
def test_rapid_reset_past_the_budget_gets_goaway_enhance_your_calm(with_data: bool) -> None:
    """CVE-2023-44487: streams reset before their answer cost the server a request each;
    past the budget the connection ends, every stream reset, and nothing is left behind."""

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        wire = []
        for i in range(5000):
            stream = 1 + 2 * i
            wire.append(peer.headers(stream, request()))
            if with_data:
                wire.append(f.frame(f.DATA, 0, stream, b"payload"))
            wire.append(f.rst_stream(stream, f.CANCEL))
        peer.send(*wire)
        frame = await goaway(peer, f.ENHANCE_YOUR_CALM)
        assert b"rapid reset" in frame.payload
        assert RESETS < len(app.handlers) <= RESETS + 1
        assert all(h.reset for h in app.handlers.values())
        assert conns[0].core.streams == {}

    run(test)


def test_a_reset_after_the_answer_began_is_not_counted() -> None:
    """A client cancelling a call the server already answers (a streaming call it no longer
    wants, say) is no flood, however many it cancels."""

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        wire = []
        for i in range(3 * RESETS):
            stream = 1 + 2 * i
            wire += [peer.headers(stream, request(), end_stream=True), f.rst_stream(stream, 8)]
        peer.send(*wire)
        frames = await peer.until_ping()
        assert all(x.kind != f.GOAWAY for x in frames)
        assert len(app.handlers) == 3 * RESETS and all(h.reset for h in app.handlers.values())
        peer.send(peer.headers(1 + 6 * RESETS, request(), end_stream=True))
        frames = await peer.until_ping()
        assert [x.kind for x in frames if x.stream == 1 + 6 * RESETS][:1] == [f.HEADERS]

    run(test, Recorder(answer=1 << 20))  # answers that start, and wait for the window


def test_continuation_flood_of_empty_frames_is_stopped() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        block = peer.encoder.encode(request())
        empty = f.frame(f.CONTINUATION, 0, 1, b"")
        peer.send(f.frame(f.HEADERS, 0, 1, block), empty * 50_000)
        frame = await goaway(peer, f.ENHANCE_YOUR_CALM)
        assert b"empty frames" in frame.payload

    run(test)


@pytest.mark.parametrize("continued", [False, True])
def test_header_block_over_the_limit(continued: bool) -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        big = request(b"/t/Echo", (b"x-big", b"v" * MAX_HEADER_BLOCK))
        block = peer.encoder.encode(big, huffman=False)
        if continued:
            parts = [block[i : i + 16_000] for i in range(0, len(block), 16_000)]
            peer.send(f.frame(f.HEADERS, 0, 1, parts[0]))
            peer.send(*(f.frame(f.CONTINUATION, 0, 1, p) for p in parts[1:-1]))
            peer.send(f.frame(f.CONTINUATION, f.END_HEADERS, 1, parts[-1]))
        else:
            peer.send(f.frame(f.HEADERS, f.END_HEADERS, 1, block))
        await goaway(peer, f.ENHANCE_YOUR_CALM)
        assert app.handlers == {}

    run(test)


def test_window_update_overflowing_the_connection_window() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(f.window_update(0, f.MAX_WINDOW))
        await goaway(peer, f.FLOW_CONTROL_ERROR)

    run(test)


def test_window_update_overflowing_a_stream_window_resets_that_stream() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()), f.window_update(1, f.MAX_WINDOW))
        frames = await peer.until_ping()
        assert [(x.kind, x.stream, x.code) for x in frames] == [
            (f.RST_STREAM, 1, f.FLOW_CONTROL_ERROR)
        ]
        assert app.handlers[1].reset
        await still_serving(peer, 3)

    run(test)


def test_zero_window_update_on_a_stream_resets_it() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()), f.window_update(1, 0))
        frames = await peer.until_ping()
        assert [(x.kind, x.stream, x.code) for x in frames] == [(f.RST_STREAM, 1, f.PROTOCOL_ERROR)]
        await still_serving(peer, 3)

    run(test)


def test_zero_window_update_on_the_connection_ends_it() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(f.window_update(0, 0))
        await goaway(peer, f.PROTOCOL_ERROR)

    run(test)


def test_data_on_a_closed_stream_is_dropped() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        await still_serving(peer, 1)
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b"late"))
        await still_serving(peer, 3)

    run(test)


@pytest.mark.parametrize("stream", [2, 7])
def test_data_on_a_stream_never_opened_ends_the_connection(stream: int) -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        await still_serving(peer, 5)
        peer.send(f.frame(f.DATA, 0, stream, b"x" * 10))
        await goaway(peer, f.PROTOCOL_ERROR)

    run(test)


def test_streams_past_the_advertised_limit_are_refused() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        ids = [1 + 2 * i for i in range(MAX_STREAMS + 1)]
        peer.send(*(peer.headers(i, request()) for i in ids))
        frames = await peer.until_ping()
        assert [(x.kind, x.stream, x.code) for x in frames] == [
            (f.RST_STREAM, ids[-1], f.REFUSED_STREAM)
        ]
        assert len(conns[0].core.streams) == MAX_STREAMS
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b""))  # one finishes: room for one more
        await still_serving(peer, ids[-1] + 2)

    run(test, Recorder())


FLOODS = {
    "ping": f.frame(f.PING, 0, 0, b"12345678"),
    "settings": f.settings({f.MAX_FRAME_SIZE: 20_000}),
}


@pytest.mark.parametrize("kind", ["ping", "settings", "answers"])
def test_a_client_that_never_reads_cannot_grow_the_write_buffer(kind: str) -> None:
    """Answers to a flood wait in the transport's buffer while the client does not read; the
    server stops reading until they drain, so the buffer stays near its high-water mark."""

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        transport = conns[0].transport
        peer.send(f.window_update(0, f.MAX_WINDOW - f.DEFAULT_WINDOW))
        stream = 1
        flooding = asyncio.ensure_future(asyncio.sleep(0))
        while transport.is_reading():
            if flooding.done():
                if kind == "answers":
                    ids = range(stream, stream + 200, 2)
                    peer.send(*(peer.headers(i, request(), True) for i in ids))
                    stream += 200
                else:
                    peer.send(FLOODS[kind] * 1000)
                flooding = asyncio.ensure_future(peer.drain())
            await asyncio.sleep(0.001)
            assert transport.get_write_buffer_size() < 8 << 20
        assert transport.get_write_buffer_size() < 2 << 20
        flooding.cancel()

    run(
        test,
        Recorder(answer=16_000),
        {f.INITIAL_WINDOW_SIZE: f.MAX_WINDOW} if kind == "answers" else None,
    )


def test_after_a_connection_error_handlers_are_reset_and_late_answers_dropped() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: errors.append(context)
        )
        peer.send(peer.headers(1, request()))
        await peer.until_ping()
        peer.send(f.frame(f.PING, 0, 0, b"short"))
        await peer.next(f.GOAWAY)
        assert app.handlers[1].reset
        stream = app.handlers[1].stream
        stream.send_headers(STATUS_200)  # a handler finishing during the linger
        stream.send_data(b"late", end=True)
        await asyncio.sleep(0.05)
        assert errors == []
        assert await peer.closed() == []

    run(test, Recorder(answer=None))
