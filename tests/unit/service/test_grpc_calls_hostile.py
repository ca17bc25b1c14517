"""pbd.grpc.calls against requests a server should not serve as sent: a method other than
POST, headers past the advertised size, calls reset in the read that completed them, and a
streaming client that sends faster than its handler reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_calls_peer import answer, call, code, echo, message, run_calls, same, unary
from h2_peer import Peer, request

from pbd.grpc.calls import Calls, Method
from pbd.grpc.protocol import Context
from pbd.h2 import frames as f
from pbd.h2.limits import DEFAULT_LIMITS


def test_a_method_other_than_post_is_unknown_as_in_triton() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        fields = [(n, b"GET" if n == b":method" else v) for n, v in request(b"/t/Echo")]
        peer.send(peer.headers(1, fields, end_stream=True))
        got = await answer(peer, 1)
        assert got.status == (code(grpc.StatusCode.UNKNOWN), "Bad method header 'GET': not POST")
        assert (await call(peer, b"/t/Echo", message(b"x"), stream=3)).messages == [b"x"]

    run_calls({b"/t/Echo": unary(echo)}, test)


def test_headers_past_the_advertised_size_are_unavailable_and_the_connection_goes_on() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        big = (b"x-big", b"v" * DEFAULT_LIMITS.max_header_list)
        got = await call(peer, b"/t/Echo", message(b"x"), extra=(big,))
        status, details = got.status
        assert status == code(grpc.StatusCode.UNAVAILABLE)
        assert "16384 bytes, SETTINGS_MAX_HEADER_LIST_SIZE" in details
        assert (await call(peer, b"/t/Echo", message(b"y"), stream=3)).messages == [b"y"]
        assert calls.active == 0

    run_calls({b"/t/Echo": unary(echo)}, test)


def test_a_call_reset_in_the_read_that_completed_it_never_starts() -> None:
    """Rapid reset with DATA: the handler would run (and reach a worker) for nothing."""
    started: list[bytes] = []

    async def handler(request: bytes, context: Context) -> bytes:
        started.append(request)
        return request

    async def test(peer: Peer, calls: Calls) -> None:
        wire = []
        for stream in range(1, 100, 2):
            wire += [
                peer.headers(stream, request(b"/t/Count")),
                f.frame(f.DATA, f.END_STREAM, stream, message(b"x")),
                f.rst_stream(stream, f.CANCEL),
            ]
        peer.send(b"".join(wire))
        await peer.until_ping()
        assert started == [] and calls.active == 0
        assert (await call(peer, b"/t/Count", message(b"y"), stream=101)).messages == [b"y"]

    run_calls({b"/t/Count": unary(handler)}, test)


def test_a_streaming_handler_that_does_not_read_holds_its_clients_window() -> None:
    """Requests are credited back as the handler takes them: a client sending faster than
    its handler reads stops at the stream window instead of filling the server's memory."""
    gate = asyncio.Event()

    async def slow(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        await gate.wait()
        async for item in requests:
            yield item

    async def test(peer: Peer, calls: Calls) -> None:
        chunk = message(bytes((1 << 20) - 5))
        peer.send(peer.headers(1, request(b"/t/Slow")))
        for _ in range(12):
            peer.send(f.frame(f.DATA, 0, 1, chunk))
        await peer.drain()
        frames = await peer.until_ping()
        assert not [x for x in frames if x.kind == f.WINDOW_UPDATE and x.stream == 1]
        gate.set()
        await asyncio.sleep(0.1)
        frames = await peer.until_ping()
        granted = [x for x in frames if x.kind == f.WINDOW_UPDATE and x.stream == 1]
        assert sum(int.from_bytes(x.payload, "big") for x in granted) >= 12 << 20

    run_calls({b"/t/Slow": Method(True, slow, same, same)}, test)
