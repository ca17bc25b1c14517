"""pbd.grpc.calls over a real pbd.h2 connection, driven by the raw-frame client (h2_peer):
message framing, compression, size limits, deadlines, status trailers and errors."""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_calls_peer import abort, answer, call, code, echo, message, run_calls, same, unary
from h2_peer import Peer, connect, request, serve
from hypothesis import given, settings
from hypothesis import strategies as st

from pbd.grpc import calls as calls_module
from pbd.grpc.calls import Calls, Method
from pbd.grpc.protocol import Context, parse_timeout
from pbd.h2 import frames as f


async def _sleep(request: bytes, context: Context) -> bytes:
    await asyncio.sleep(3600)
    return b""


async def _metadata(request: bytes, context: Context) -> bytes:
    return repr(sorted(context.invocation_metadata())).encode()


async def _stream(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
    async for item in requests:
        yield item


METHODS = {
    b"/t/Echo": unary(echo),
    b"/t/Sleep": unary(_sleep),
    b"/t/Abort": unary(abort),
    b"/t/Metadata": unary(_metadata),
    b"/t/Stream": Method(True, _stream, same, same),
}


def run(test: Callable[[Peer, Calls], Awaitable[None]], **limits: Any) -> None:
    run_calls(METHODS, test, **limits)


# -- messages ---------------------------------------------------------------------------------


@settings(max_examples=40)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6), st.data())
def test_messages_split_at_any_point_come_back_whole(
    bodies: list[bytes], draw: st.DataObject
) -> None:
    wire = b"".join(message(b) for b in bodies)
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]

    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Stream", *chunks)
        assert got.messages == bodies
        assert got.status == (0, "")

    run(test)


def test_several_messages_in_one_chunk_and_one_across_chunks() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        wire = message(b"a") + message(b"") + message(b"c" * 70_000)
        got = await call(peer, b"/t/Stream", wire[:20], wire[20:])
        assert got.messages == [b"a", b"", b"c" * 70_000]

    run(test)


@pytest.mark.parametrize(
    "encoding, compress",
    [(b"gzip", gzip.compress), (b"deflate", zlib.compress)],
)
def test_compressed_messages(encoding: bytes, compress: Callable[[bytes], bytes]) -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        body = b"hello " * 1000
        got = await call(
            peer,
            b"/t/Echo",
            message(compress(body), compressed=True),
            extra=((b"grpc-encoding", encoding),),
        )
        assert got.messages == [body] and got.status == (0, "")

    run(test)


def test_unknown_encoding_is_unimplemented_and_names_what_is_accepted() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(
            peer,
            b"/t/Echo",
            message(b"\x00\x01", compressed=True),
            extra=((b"grpc-encoding", b"snappy"),),
        )
        assert got.status[0] == code(grpc.StatusCode.UNIMPLEMENTED)
        assert "snappy" in got.status[1]
        assert (b"grpc-accept-encoding", b"identity,deflate,gzip") in got.blocks[0]

    run(test)


def test_compressed_flag_without_encoding_and_corrupt_data_are_internal() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Echo", message(b"zz", compressed=True))
        assert got.status == (
            code(grpc.StatusCode.INTERNAL),
            "Compressed message without grpc-encoding",
        )
        got = await call(
            peer,
            b"/t/Echo",
            message(b"not gzip", compressed=True),
            stream=3,
            extra=((b"grpc-encoding", b"gzip"),),
        )
        assert got.status[0] == code(grpc.StatusCode.INTERNAL)
        assert got.status[1].startswith("Cannot decompress the message")

    run(test)


def test_a_gzip_bomb_stops_at_the_message_limit() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        bomb = gzip.compress(bytes(50_000_000))
        assert len(bomb) < 100_000
        got = await call(
            peer, b"/t/Echo", message(bomb, True), extra=((b"grpc-encoding", b"gzip"),)
        )
        assert got.status == (
            code(grpc.StatusCode.RESOURCE_EXHAUSTED),
            "Received message larger than max (1000001 vs. 1000000)",
        )

    run(test, max_message=1_000_000)


def test_message_over_the_limit() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Echo", message(b"x" * 1001))
        assert got.status == (
            code(grpc.StatusCode.RESOURCE_EXHAUSTED),
            "Received message larger than max (1001 vs. 1000)",
        )

    run(test, max_message=1000)


def test_a_declared_4_gib_message_is_refused_before_any_of_it_arrives() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        peer.send(
            peer.headers(1, request(b"/t/Echo")), f.frame(f.DATA, 0, 1, b"\x00\xff\xff\xff\xff")
        )
        got = await answer(peer, 1)
        assert got.status == (
            code(grpc.StatusCode.RESOURCE_EXHAUSTED),
            f"Received message larger than max ({2**32 - 1} vs. {2**31 - 1})",
        )

    run(test)


def test_unary_calls_without_exactly_one_message() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Echo")
        assert got.status == (code(grpc.StatusCode.INTERNAL), "No request message")
        got = await call(peer, b"/t/Echo", message(b"a") + message(b"b"), stream=3)
        assert got.status[0] == code(grpc.StatusCode.UNIMPLEMENTED)
        got = await call(peer, b"/t/Echo", message(b"abc")[:6], stream=5)
        assert got.status == (code(grpc.StatusCode.INTERNAL), "Incomplete request message")
        assert calls.active == 0

    run(test)


# -- deadlines --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds",
    [
        (b"2H", 7200.0), (b"3M", 180.0), (b"10S", 10.0), (b"250m", 0.25),
        (b"7u", 7e-6), (b"99999999n", 0.099999999), (b"0S", 0.0), (b"1 S", 1.0),
        (b"123456789S", 123456789.0), (b"99999999999999999999S", None),
    ],
)  # fmt: skip
def test_grpc_timeout_as_grpc_core_reads_it(value: bytes, seconds: float | None) -> None:
    """grpc core (Triton 2.51) takes any number of digits, spaces before the unit, and an
    overflow as no deadline."""
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", [b"", b"S", b"10", b"10s", b"-1S", b"1.5S", b"+1S", b"\xff1S", b"\xd9\xa1S"]
)
def test_grpc_timeout_junk_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match="invalid grpc-timeout"):
        parse_timeout(value)


def test_a_bad_grpc_timeout_is_internal_as_in_triton() -> None:
    """Triton resets such a stream with INTERNAL_ERROR, which its clients see as INTERNAL;
    pbd answers INTERNAL too, saying what was wrong, and serves the connection on."""

    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Echo", message(b"x"), extra=((b"grpc-timeout", b"5X"),))
        assert got.status == (
            code(grpc.StatusCode.INTERNAL),
            "Invalid grpc-timeout '5X': digits, then H, M, S, m, u or n",
        )
        got = await call(peer, b"/t/Echo", message(b"x"), stream=3)
        assert got.messages == [b"x"]
        assert calls.active == 0

    run_calls({b"/t/Echo": unary(echo)}, test)


def test_deadline_expires_while_the_handler_runs_and_before_the_request_ends() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        timeout = ((b"grpc-timeout", b"20m"),)
        got = await call(peer, b"/t/Sleep", message(b""), extra=timeout)
        assert got.status == (code(grpc.StatusCode.DEADLINE_EXCEEDED), "Deadline Exceeded")
        peer.send(peer.headers(3, request(b"/t/Echo", *timeout)))  # never ends its request
        got = await answer(peer, 3)
        assert got.status == (code(grpc.StatusCode.DEADLINE_EXCEEDED), "Deadline Exceeded")
        assert calls.active == 0
        got = await call(peer, b"/t/Echo", message(b"still here"), stream=5)
        assert got.messages == [b"still here"]

    run(test)


# -- status and errors ------------------------------------------------------------------------


def test_grpc_message_is_percent_encoded() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        details = "bad ✓ 100%\nnext line"
        got = await call(peer, b"/t/Abort", message(details.encode()))
        raw = dict(got.blocks[-1])[b"grpc-message"]
        assert raw == b"bad %E2%9C%93 100%25%0Anext line"
        assert got.status == (code(grpc.StatusCode.INVALID_ARGUMENT), details)

    run(test)


def test_unknown_method_is_a_trailers_only_unimplemented() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        peer.send(peer.headers(1, request(b"/t/Nope"), end_stream=True))
        frames = await peer.until_ping()
        assert [(x.kind, x.flags & f.END_STREAM) for x in frames] == [(f.HEADERS, f.END_STREAM)]
        fields = dict(frames[0].fields or [])
        assert fields[b":status"] == b"200"
        assert fields[b"content-type"] == b"application/grpc"
        assert fields[b"grpc-status"] == b"12" and fields[b"grpc-message"] == b"Method not found!"

    run(test)


def test_wrong_content_type_is_http_415() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        fields = [(n, b"text/plain" if n == b"content-type" else v) for n, v in request()]
        block = peer.encoder.encode(fields)
        peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, block))
        frames = await peer.until_ping()
        assert [x.fields for x in frames] == [[(b":status", b"415")]]

    run(test)


def test_concurrent_call_limit() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        peer.send(peer.headers(1, request(b"/t/Sleep")))
        got = await call(peer, b"/t/Echo", message(b"x"), stream=3)
        assert got.status == (
            code(grpc.StatusCode.RESOURCE_EXHAUSTED), "Concurrent RPC limit exceeded!"
        )  # fmt: skip
        peer.send(f.rst_stream(1, f.CANCEL))
        await peer.until_ping()
        assert calls.active == 0
        assert (await call(peer, b"/t/Echo", message(b"x"), stream=5)).messages == [b"x"]

    run(test, max_calls=1)


def test_metadata_leaves_out_transport_headers_and_decodes_binary_values() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        extra = (
            (b"x-key", b"v"), (b"x-id-bin", b"AAEC"), (b"x-odd-bin", b"A"),
            (b"grpc-timeout", b"10S"),
        )  # fmt: skip
        got = await call(peer, b"/t/Metadata", message(b""), extra=extra)
        assert got.messages == [
            b"[('x-id-bin', b'\\x00\\x01\\x02'), ('x-key', 'v'), ('x-odd-bin', b'A')]"
        ]

    run(test)


def test_client_reset_cancels_the_handler() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        peer.send(
            peer.headers(1, request(b"/t/Sleep")), f.frame(f.DATA, f.END_STREAM, 1, message(b""))
        )
        await peer.until_ping()
        assert calls.active == 1
        peer.send(f.rst_stream(1, f.CANCEL))
        await peer.until_ping()
        assert calls.active == 0
        while [t for t in asyncio.all_tasks() if "_run_unary" in repr(t)]:
            await asyncio.sleep(0.01)

    run(test)


def test_messages_inflate_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 MB gzip bomb inflates to 2 GiB in about 20 s of CPU here: on the event loop that
    would stall every other call of the daemon for as long."""
    threads: list[int] = []
    real = zlib.decompressobj

    class Recording:
        def __init__(self, *args: int) -> None:
            self.inflater = real(*args)

        def decompress(self, data: bytes, max_length: int) -> bytes:
            threads.append(threading.get_ident())
            return self.inflater.decompress(data, max_length)

    monkeypatch.setattr(calls_module.zlib, "decompressobj", Recording)

    async def test(peer: Peer, calls: Calls) -> None:
        body = gzip.compress(b"abc")
        gz = ((b"grpc-encoding", b"gzip"),)
        got = await call(peer, b"/t/Echo", message(body, True), extra=gz)
        assert got.messages == [b"abc"]
        got = await call(peer, b"/t/Stream", message(body, True) * 2, stream=3, extra=gz)
        assert got.messages == [b"abc", b"abc"]

    run(test)
    assert len(threads) == 3 and threading.get_ident() not in threads


# -- Context.send_now -------------------------------------------------------------------------


def test_send_now_writes_ahead_of_what_the_handler_yields_and_once_headers() -> None:
    """A streaming handler's callback sends a message at once, before the handler yields
    again: headers once, messages in the order sent, OK trailers at the end."""
    sent_before_yield: list[bool] = []

    async def handler(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for item in requests:
            sent_before_yield.append(context.send_now(b"now:" + item))
            yield b"yielded:" + item

    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Now", message(b"a"), message(b"b"))
        assert got.messages == [b"now:a", b"yielded:a", b"now:b", b"yielded:b"]
        assert got.status == (0, "")
        assert sum(1 for block in got.blocks if (b":status", b"200") in block) == 1

    run_calls({b"/t/Now": Method(True, handler, same, same)}, test)
    assert sent_before_yield == [True, True]


def test_send_now_refuses_while_the_client_is_behind_by_the_buffer() -> None:
    """Past the stream buffer held for a client that gives no window, send_now says False
    (the caller yields instead, and the call waits for the client)."""
    answers: list[bool] = []

    async def handler(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for _ in requests:
            for _ in range(4):
                answers.append(context.send_now(b"x" * 1000))
        yield b"end"

    async def test(peer: Peer, calls: Calls) -> None:
        calls.stream_buffer = 1500
        peer.send(peer.headers(1, request(b"/t/Full"), end_stream=False))
        peer.send(f.frame(f.DATA, f.END_STREAM, 1, message(b"go")))
        for _ in range(200):
            if len(answers) == 4:
                break
            await asyncio.sleep(0.01)

    def small_window(methods: dict[bytes, Method], test: Any) -> None:
        async def main() -> None:
            calls = Calls(methods, 2**31 - 1, None)
            async with serve(calls) as served:
                peer = await connect(served.port, {f.INITIAL_WINDOW_SIZE: 10})
                try:
                    await test(peer, calls)
                finally:
                    peer.writer.close()

        asyncio.run(main())

    small_window({b"/t/Full": Method(True, handler, same, same)}, test)
    # The first fills the 10-byte window and waits; the second too (1,000 held, under the
    # buffer); past 1,500 held the rest are refused.
    assert answers == [True, True, False, False]
