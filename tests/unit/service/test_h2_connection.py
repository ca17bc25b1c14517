"""pbd.h2.connection over real sockets: a raw-frame client (h2_peer) against the connection
served by asyncio. Framing, flow control both ways, streams, shutdown (hostile clients:
test_h2_connection_hostile.py)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct

import pytest
from h2_peer import (
    STATUS_200,
    TRAILERS,
    Frame,
    Peer,
    Recorder,
    connect,
    data,
    goaway,
    pattern,
    request,
    run,
    serve,
    still_serving,
)

from pbd.h2 import frames as f
from pbd.h2.connection import IOV_MAX, Connection, Refused, Shared, write_vector
from pbd.h2.limits import DEFAULT_LIMITS, Limits

STREAM_WINDOW = DEFAULT_LIMITS.stream_window
CONNECTION_WINDOW = DEFAULT_LIMITS.connection_window

# -- framing ---------------------------------------------------------------------------------


def test_not_http2_gets_goaway_protocol_error() -> None:
    async def main() -> None:
        async with serve(Recorder()) as served:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await goaway(Peer(reader, writer), f.PROTOCOL_ERROR)
            writer.close()

    asyncio.run(main())


def test_preface_and_frames_split_across_reads() -> None:
    async def main() -> None:
        app = Recorder()
        async with serve(app) as served:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            peer = Peer(reader, writer)
            wire = f.PREFACE + f.settings({}) + peer.headers(1, request(), end_stream=True)
            for i in range(len(wire)):  # one byte at a time
                writer.write(wire[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
            frames = await peer.until_ping()
            assert data(frames) == b"xxx"
            assert app.handlers[1].headers[b":path"] == b"/t/Echo"
            writer.close()

    asyncio.run(main())


def test_ping_is_answered_with_its_payload_and_a_bad_ping_ends_the_connection() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(f.frame(f.PING, 0, 0, b"12345678"))
        answer = await peer.next(f.PING)
        assert (answer.flags, answer.payload) == (f.ACK, b"12345678")
        peer.send(f.frame(f.PING, f.ACK, 0, b"ignored!"))  # an ack from the client: no answer
        assert await peer.until_ping() == []
        peer.send(f.frame(f.PING, 0, 0, b"short"))
        await goaway(peer, f.FRAME_SIZE_ERROR)

    run(test)


def test_continuation_frames_assemble_one_header_block() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        block = peer.encoder.encode(request(b"/t/Echo", (b"x-long", b"v" * 3000)))
        a, b, c = block[:10], block[10:2000], block[2000:]
        peer.send(
            f.frame(f.HEADERS, f.END_STREAM, 1, a),
            f.frame(f.CONTINUATION, 0, 1, b),
            f.frame(f.CONTINUATION, f.END_HEADERS, 1, c),
        )
        assert data(await peer.until_ping()) == b"xxx"
        assert app.handlers[1].headers[b"x-long"] == b"v" * 3000

    run(test)


def test_a_frame_inside_a_header_block_ends_the_connection() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        block = peer.encoder.encode(request())
        peer.send(f.frame(f.HEADERS, 0, 1, block[:5]), f.frame(f.PING, 0, 0, b"12345678"))
        await goaway(peer, f.PROTOCOL_ERROR)

    run(test)


def test_padded_headers_with_priority_and_padded_data() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        block = peer.encoder.encode(request())
        priority = struct.pack(">IB", 0, 15)
        peer.send(
            f.frame(
                f.HEADERS,
                f.PADDED | f.PRIORITY_FLAG | f.END_HEADERS,
                1,
                bytes([7]) + priority + block + bytes(7),
            ),
            f.frame(f.DATA, f.PADDED, 1, bytes([3]) + b"hello" + bytes(3)),
            f.frame(f.DATA, f.PADDED | f.END_STREAM, 1, bytes([0]) + b" world"),
        )
        assert data(await peer.until_ping()) == b"xxx"
        assert app.handlers[1].data == b"hello world"

    run(test)


def test_bad_padding_ends_the_connection() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()), f.frame(f.DATA, f.PADDED, 1, bytes([9]) + b"ab"))
        await goaway(peer, f.PROTOCOL_ERROR)

    run(test)


@pytest.mark.parametrize("seed", range(3))
def test_data_split_across_many_reads(seed: int) -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        rng = random.Random(seed)
        body = rng.randbytes(300_000)
        wire = peer.headers(1, request())
        wire += f.frame(f.DATA, 0, 1, body[:100_000])
        wire += f.frame(f.DATA, f.END_STREAM, 1, body[100_000:])
        pos = 0
        while pos < len(wire):
            step = rng.choice([1, 2, 8, 9, 10, 1000, 65_536])
            peer.send(wire[pos : pos + step])
            pos += step
            await peer.drain()
            await asyncio.sleep(0)
        assert data(await peer.until_ping()) == b"xxx"
        assert app.handlers[1].data == body

    run(test)


# -- flow control, sending ---------------------------------------------------------------------


def test_sending_waits_for_the_stream_window_and_trailers_wait_behind_data() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request(), end_stream=True))
        frames = await peer.until_ping()
        assert [x.kind for x in frames] == [f.HEADERS, f.DATA]
        assert len(data(frames)) == 100
        peer.send(f.window_update(1, 500))
        frames = await peer.until_ping()
        assert [x.kind for x in frames] == [f.DATA] and len(data(frames)) == 500
        # A larger SETTINGS_INITIAL_WINDOW_SIZE grows the open stream's window by the difference.
        peer.send(f.settings({f.INITIAL_WINDOW_SIZE: 500}))
        frames = await peer.until_ping()
        assert len(data(frames)) == 400
        assert frames[-1].kind == f.HEADERS and frames[-1].flags & f.END_STREAM
        assert frames[-1].fields == [(b"grpc-status", b"0")]

    run(test, Recorder(answer=1000), {f.INITIAL_WINDOW_SIZE: 100})


def test_a_smaller_initial_window_can_make_the_stream_window_negative() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request(), end_stream=True))
        assert len(data(await peer.until_ping())) == 1000
        peer.send(f.settings({f.INITIAL_WINDOW_SIZE: 0}))  # window 1000 - 1000 → -1000
        peer.send(f.window_update(1, 1000))  # back to 0: still nothing to send
        assert data(await peer.until_ping()) == b""
        peer.send(f.window_update(1, 10))
        assert len(data(await peer.until_ping())) == 10

    run(test, Recorder(answer=5000), {f.INITIAL_WINDOW_SIZE: 1000})


def test_a_flood_of_initial_window_changes_leaves_each_stream_the_right_window() -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE changes reach open streams when they next send (a flood
    of them costs O(1) per frame, not O(open streams))."""

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()))
        flood = [f.settings({f.INITIAL_WINDOW_SIZE: 100 + i % 7}) for i in range(90)]
        peer.send(*flood, f.settings({f.INITIAL_WINDOW_SIZE: 300}))
        peer.send(peer.headers(3, request(), end_stream=True))
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b""))
        frames = await peer.until_ping()
        assert len(data(frames, 1)) == len(data(frames, 3)) == 300
        peer.send(f.settings({f.INITIAL_WINDOW_SIZE: 350}))
        frames = await peer.until_ping()
        assert len(data(frames, 1)) == len(data(frames, 3)) == 50

    run(test, Recorder(answer=1000), {f.INITIAL_WINDOW_SIZE: 100})


def test_sending_waits_for_the_connection_window() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request(), end_stream=True))
        frames = await peer.until_ping()
        assert len(data(frames)) == f.DEFAULT_WINDOW
        assert all(len(x.payload) <= f.DEFAULT_MAX_FRAME for x in frames)
        peer.send(f.window_update(0, 100_000))
        frames = await peer.until_ping()
        assert len(data(frames)) == 100_000 - f.DEFAULT_WINDOW
        assert frames[-1].kind == f.HEADERS and frames[-1].flags & f.END_STREAM

    run(test, Recorder(answer=100_000), {f.INITIAL_WINDOW_SIZE: 1 << 20})


def test_peer_max_frame_size_is_respected_for_data_and_header_blocks() -> None:
    big_trailers = (None, f.header_block([(b"grpc-status", b"0"), (b"x-big", b"t" * 50_000)]))

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(f.window_update(0, 1 << 20), peer.headers(1, request(), end_stream=True))
        frames = await peer.until_ping()
        sizes = [len(x.payload) for x in frames if x.kind == f.DATA]
        assert max(sizes) == 20_000 and sum(sizes) == 100_000
        tail = [x for x in frames if x.kind in (f.HEADERS, f.CONTINUATION)][1:]
        assert [x.kind for x in tail] == [f.HEADERS, f.CONTINUATION, f.CONTINUATION]
        assert all(len(x.payload) <= 20_000 for x in tail)
        assert tail[0].flags & f.END_STREAM and tail[-1].flags & f.END_HEADERS
        assert tail[-1].fields is not None and tail[-1].fields[1] == (b"x-big", b"t" * 50_000)

    run(
        test,
        Recorder(answer=100_000, trailers=big_trailers),
        {f.INITIAL_WINDOW_SIZE: 1 << 20, f.MAX_FRAME_SIZE: 20_000},
    )


# -- large answers: one writev, the rest through the transport ----------------------------------


def test_large_answers_leave_whole_and_in_order_when_the_socket_fills() -> None:
    """A large answer's frames leave in one writev for as much as the socket takes; the rest
    waits in the transport, and what is written while it waits queues behind it."""
    size = 3 << 20  # far more than the socket and the client's reading take before it reads

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        (conn,) = conns
        conn.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 8192
        )
        peer.send(f.window_update(0, 1 << 30))
        peer.send(peer.headers(1, request(), end_stream=True))
        peer.send(peer.headers(3, request(), end_stream=True))
        for _ in range(100):  # the server's read of both requests, bounded
            await asyncio.sleep(0.01)
            if conn.transport.get_write_buffer_size():
                break
        assert conn.transport.get_write_buffer_size() > 0  # the socket did not take it all
        peer.send(peer.headers(5, request(), end_stream=True))  # answered behind the rest
        frames = await peer.until_ping()
        for stream in (1, 3, 5):
            assert data(frames, stream) == pattern(size)
        ends = [x.stream for x in frames if x.kind == f.HEADERS and x.flags & f.END_STREAM]
        assert ends == [1, 3, 5]

    run(test, Recorder(answer=size, patterned=True), {f.INITIAL_WINDOW_SIZE: f.MAX_WINDOW})


def test_buffers_written_while_the_transport_holds_some_go_behind_them() -> None:
    """The socket has room again (the client read), but the transport has not sent what it
    holds yet: a list written now must not overtake it."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        conn = Connection(Recorder(), lambda c: None, Shared())
        transport, _ = await loop.connect_accepted_socket(lambda: conn, sock=ours)
        try:
            first = pattern(1 << 20)
            transport.write(first)  # the socket takes a little, the transport holds the rest
            assert transport.get_write_buffer_size() > 0
            got = bytearray()
            while chunk := _take(theirs):  # the client reads all it can; the loop did not run
                got += chunk
            assert conn.core is not None
            conn.core.write_parts([b"second", memoryview(b"-part")])
            for _ in range(5000):  # the transport sends what it holds as the socket drains
                if got.endswith(b"second-part"):
                    break
                await asyncio.sleep(0.001)
                got += _take(theirs)
            assert bytes(got).endswith(first + b"second-part")
        finally:
            transport.close()
            theirs.close()

    asyncio.run(main())


def _take(sock: socket.socket) -> bytes:
    """What ``sock`` has now, without waiting."""
    try:
        return sock.recv(1 << 20, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


def _pair(sndbuf: int = 0) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    if sndbuf:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    a.setblocking(False)
    return a, b


def _drain(b: socket.socket) -> bytes:
    b.setblocking(False)
    got = bytearray()
    with contextlib.suppress(BlockingIOError):
        while chunk := b.recv(1 << 20):
            got += chunk
    return bytes(got)


def test_write_vector_writes_every_part_in_order_past_iov_max() -> None:
    parts: list[bytes | memoryview] = [bytes([i % 256]) * (i % 5) for i in range(IOV_MAX * 2 + 7)]
    parts[3] = memoryview(b"a view")
    a, b = _pair()
    try:
        assert write_vector(a.fileno(), parts) == []
        assert _drain(b) == b"".join(parts)
    finally:
        a.close()
        b.close()


def test_write_vector_returns_what_a_full_socket_did_not_take() -> None:
    body = pattern(1 << 20)
    parts: list[bytes | memoryview] = [
        memoryview(body)[i : i + 1000] for i in range(0, len(body), 1000)
    ]
    a, b = _pair(sndbuf=4096)
    try:
        rest = write_vector(a.fileno(), parts)
        sent = _drain(b)
        assert rest and 0 < len(sent) < len(body)
        assert sent + b"".join(rest) == body  # a part cut in two starts the rest
        assert write_vector(a.fileno(), []) == []
    finally:
        a.close()
        b.close()


def test_write_vector_gives_back_everything_on_an_error() -> None:
    a, b = _pair()
    b.close()
    try:
        parts: list[bytes | memoryview] = [b"one", b"two"]
        assert write_vector(a.fileno(), parts) == parts  # EPIPE: the transport reports it
    finally:
        a.close()


# -- flow control, receiving -----------------------------------------------------------------


def test_receive_windows_are_topped_up() -> None:
    chunk = bytes(1 << 20)

    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        updates: list[Frame] = []
        for stream in (1, 3, 5):
            peer.send(peer.headers(stream, request()))
            for _ in range(STREAM_WINDOW // len(chunk) - 1):
                peer.send(f.frame(f.DATA, 0, stream, chunk))
                await peer.drain()
            peer.send(f.frame(f.DATA, f.END_STREAM, stream, b""))
            updates += [x for x in await peer.until_ping() if x.kind == f.WINDOW_UPDATE]
        assert {x.stream for x in updates} == {0, 1, 3, 5}
        total = sum(len(app.handlers[s].data) for s in (1, 3, 5))
        granted = sum(int.from_bytes(x.payload, "big") for x in updates if x.stream == 0)
        assert total == 3 * (STREAM_WINDOW - len(chunk))
        assert total - granted < CONNECTION_WINDOW // 2

    run(test, Recorder(answer=0))


# -- streams ----------------------------------------------------------------------------------


def test_rst_stream_reaches_the_handler_and_later_data_is_dropped() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()), f.frame(f.DATA, 0, 1, b"abc"))
        peer.send(f.rst_stream(1, f.CANCEL))
        assert await peer.until_ping() == []
        assert app.handlers[1].reset and app.handlers[1].data == b"abc"
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b"late"))  # in flight when it reset
        await still_serving(peer, 3)
        assert app.handlers[1].data == b"abc" and not app.handlers[1].ended
        assert conns[0].core.streams == {}

    run(test)


def test_a_dropped_connection_resets_open_streams() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()))
        await peer.until_ping()
        peer.writer.close()
        await peer.closed()
        while not app.handlers[1].reset:
            await asyncio.sleep(0.01)

    run(test)


def test_go_away_lets_open_streams_finish_and_refuses_new_ones() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()))
        await peer.until_ping()
        conns[0].go_away()
        frame = await peer.next(f.GOAWAY)
        assert struct.unpack(">II", frame.payload) == (1, f.NO_ERROR)
        peer.send(peer.headers(3, request(), end_stream=True))
        refused = await peer.next(f.RST_STREAM)
        assert (refused.stream, refused.code) == (3, f.REFUSED_STREAM)
        assert 3 not in app.handlers
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b"done"))
        assert data(await peer.until_ping()) == b"xxx"

    run(test)


def test_an_answer_before_the_request_ended_resets_the_rest_with_no_error() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()))
        await peer.until_ping()
        stream = app.handlers[1].stream
        stream.send_headers(STATUS_200)
        stream.send_trailers(TRAILERS)
        frames = await peer.until_ping()
        assert [(x.kind, x.code if x.kind == f.RST_STREAM else 0) for x in frames] == [
            (f.HEADERS, 0), (f.HEADERS, 0), (f.RST_STREAM, f.NO_ERROR)
        ]  # fmt: skip
        assert conns[0].core.streams == {}

    run(test, Recorder(answer=None))


def test_tcp_connections_get_kernel_keepalive() -> None:
    """A vanished client's connection is found by keepalive probes (grpc core pings instead)."""

    async def test(peer, app, connections) -> None:  # noqa: ANN001
        await peer.until_ping()
        sock = connections[0].transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1

    run(test)


# -- timers, memory, the connection limit ----------------------------------------------------


def _limits(**values: float) -> Limits:
    return Limits(max_ping_strikes=0, **values)  # type: ignore[arg-type]


def test_a_connection_without_a_preface_is_closed_after_the_handshake_timeout() -> None:
    async def main() -> None:
        async with serve(Recorder(), _limits(handshake_timeout=0.2)) as served:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(f.PREFACE[:10])  # slowloris: a part, then nothing
            began = asyncio.get_running_loop().time()
            frame = await goaway(Peer(reader, writer), f.ENHANCE_YOUR_CALM)
            assert b"preface" in frame.payload
            assert asyncio.get_running_loop().time() - began < 5
            writer.close()

    asyncio.run(main())


def test_a_header_block_that_never_ends_is_cut_off() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        block = peer.encoder.encode(request())
        peer.send(f.frame(f.HEADERS, 0, 1, block[:4]))
        frame = await goaway(peer, f.ENHANCE_YOUR_CALM)
        assert b"header block" in frame.payload

    run(test, limits=_limits(header_timeout=0.2))


def test_an_idle_connection_gets_goaway_no_error_and_a_busy_one_does_not() -> None:
    async def test(peer: Peer, app: Recorder, conns: list) -> None:
        peer.send(peer.headers(1, request()))  # open for longer than the idle timeout
        await asyncio.sleep(0.5)
        assert conns[0].core.error is None and not conns[0].core.going_away
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, b""))
        frames = await peer.closed()
        assert data(frames) == b"xxx"
        assert frames[-1].kind == f.GOAWAY and frames[-1].code == f.NO_ERROR

    run(test, limits=_limits(idle_timeout=0.15))


def test_connections_share_one_read_buffer() -> None:
    async def main() -> None:
        async with serve(Recorder()) as served:
            peers = [await connect(served.port) for _ in range(3)]
            buffers = {id(c.shared.read_buffer) for c in served.connections}
            assert len(buffers) == 1
            for i, peer in enumerate(peers):
                await still_serving(peer, 1 + 2 * i)
                peer.writer.close()

    asyncio.run(main())


def test_a_connection_past_the_limit_gets_goaway_and_is_closed() -> None:
    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(
                lambda: Refused("connection limit (2) reached"), "127.0.0.1", 0
            )
            stack.push_async_callback(server.wait_closed)
            stack.callback(server.close)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f.PREFACE + f.settings({}))
            frame = await goaway(Peer(reader, writer), f.ENHANCE_YOUR_CALM)
            assert b"connection limit (2) reached" in frame.payload
            writer.close()
            await writer.wait_closed()
            await asyncio.sleep(0.05)  # the server side closes on the client's EOF

    asyncio.run(main())
