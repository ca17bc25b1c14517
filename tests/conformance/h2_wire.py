"""The conformance suite's client and server: pbd's HTTP/2 server (``pbd.h2.connection`` with
the gRPC application ``pbd.grpc.calls``, one echo method) on 127.0.0.1, and a raw client that
writes frames by hand and reads what comes back. No part is mocked: the server sees what a
socket delivers. Each case says what the RFC asks of a server and checks the answer on the
wire: a connection error (GOAWAY with its code, then the end), a stream error (RST_STREAM with
its code, the connection still serving), or an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

from h2_peer import Frame, Peer, serve

from pbd.grpc.calls import Calls, Method
from pbd.grpc.protocol import Context
from pbd.h2 import frames as f
from pbd.h2.limits import Limits

ECHO = b"/t/Echo"  # unary: answers its message
WAIT = b"/t/Wait"  # unary: never answers (its stream stays half-closed once the request ends)
HOLD = b"/t/Hold"  # streaming: never reads its requests (they wait; nothing is taken)
MAX_MESSAGE = 2 << 20
# The cases sync with PINGs: the ping policy (not an RFC matter) is off here.
LIMITS = Limits(max_ping_strikes=0)


class ConnectionClosed(Exception):
    def __init__(self, frames: list[Frame]) -> None:
        super().__init__(f"connection closed after {frames}")
        self.frames = frames


def request(path: bytes = ECHO, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """A gRPC request's header list (what grpc clients send), ``extra`` fields after it."""
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", b"conformance"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *extra,
    ]


def message(body: bytes = b"hello") -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


class Client(Peer):
    """``h2_peer.Peer`` (frames by hand, every server block decoded in order) with what the
    cases ask: field blocks as literals, a whole echo call, and the RFC's verdicts."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.pings = 0
        self.high = 0  # the highest stream id used
        self.server_settings: dict[int, int] = {}

    # -- sending ------------------------------------------------------------------------------

    def block_of(self, fields: list[tuple[bytes, bytes]]) -> bytes:
        """An HPACK block (literals, no indexing: the server's table is left alone)."""
        return b"".join(f.literal(name, value) for name, value in fields)

    def headers(  # type: ignore[override]
        self,
        stream: int,
        fields: list[tuple[bytes, bytes]] | None = None,
        end_stream: bool = False,
        flags: int = f.END_HEADERS,
    ) -> bytes:
        block = self.block_of(request() if fields is None else fields)
        self.high = max(self.high, stream)
        return f.frame(f.HEADERS, flags | (f.END_STREAM if end_stream else 0), stream, block)

    def call(self, stream: int, body: bytes = b"hello") -> bytes:
        """A whole unary echo call: HEADERS, then its one message with END_STREAM."""
        return self.headers(stream) + f.frame(f.DATA, f.END_STREAM, stream, message(body))

    # -- reading ------------------------------------------------------------------------------

    async def frame(self) -> Frame:
        try:
            return await super().frame()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            raise ConnectionClosed([]) from None

    async def until_ping(self, opaque: bytes = b"") -> list[Frame]:
        """Every frame the server sends before it answers a PING sent now (it handles the
        frames it got in order, so this is all it had to say about them); ConnectionClosed
        with those frames if it closes first."""
        self.pings += 1
        opaque = opaque or self.pings.to_bytes(8, "big")
        self.send(f.frame(f.PING, 0, 0, opaque))
        frames: list[Frame] = []
        while True:
            try:
                frame = await self.frame()
            except ConnectionClosed:
                raise ConnectionClosed(frames) from None
            if frame.kind == f.PING and frame.flags & f.ACK and frame.payload == opaque:
                return frames
            frames.append(frame)

    async def rest(self) -> list[Frame]:  # Peer.closed, with ConnectionClosed
        frames: list[Frame] = []
        while True:
            try:
                frames.append(await self.frame())
            except ConnectionClosed:
                return frames

    # -- what the RFC asks ----------------------------------------------------------------------

    async def connection_error(self, *codes: int) -> Frame:
        """The server ends the connection: GOAWAY with one of ``codes``, then closes."""
        try:
            frames = await self.until_ping()
            frames += await self.rest()
        except ConnectionClosed as closed:
            frames = closed.frames
        goaways = [x for x in frames if x.kind == f.GOAWAY]
        assert goaways, f"expected GOAWAY {codes}, got {frames}"
        assert goaways[-1].code in codes, f"expected GOAWAY {codes}, got {frames}"
        return goaways[-1]

    async def stream_error(self, stream: int, *codes: int) -> list[Frame]:
        """RST_STREAM on ``stream`` with one of ``codes``, and the connection still serves."""
        frames = await self.until_ping()
        resets = [x for x in frames if x.kind == f.RST_STREAM and x.stream == stream]
        assert resets and resets[-1].code in codes, f"expected RST_STREAM {codes}, got {frames}"
        assert not any(x.kind == f.GOAWAY for x in frames), frames
        await self.serves()
        return frames

    async def no_error(self) -> list[Frame]:
        """No GOAWAY, no RST_STREAM: the server took what was sent."""
        frames = await self.until_ping()
        bad = [x for x in frames if x.kind in (f.GOAWAY, f.RST_STREAM)]
        assert not bad, f"expected no error, got {frames}"
        return frames

    async def no_error_but_resets(self) -> list[Frame]:
        """No GOAWAY; the RST_STREAM frames the server sent."""
        frames = await self.until_ping()
        assert not any(x.kind == f.GOAWAY for x in frames), frames
        return [x for x in frames if x.kind == f.RST_STREAM]

    async def serves(self) -> None:
        """A new call on the connection is answered."""
        stream = (self.high + 2) | 1
        self.send(self.call(stream))
        await self.answered(stream)

    async def answered(self, stream: int, body: bytes = b"hello") -> list[Frame]:
        """The echo call on ``stream`` is answered: its message back, grpc-status 0."""
        frames = [x for x in await self.until_ping() if x.stream == stream]
        assert [x.kind for x in frames] == [f.HEADERS, f.DATA, f.HEADERS], frames
        assert frames[1].payload == message(body), frames
        assert frames[-1].fields is not None and (b"grpc-status", b"0") in frames[-1].fields
        return frames


async def _echo(request: bytes, context: Context) -> bytes:
    return request


async def _wait(request: bytes, context: Context) -> bytes:
    await asyncio.Event().wait()
    return b""


async def _hold(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
    await asyncio.Event().wait()
    yield b""


def _same(data: bytes) -> bytes:
    return bytes(data)


@contextlib.asynccontextmanager
async def server() -> AsyncIterator[int]:
    methods = {
        ECHO: Method(False, _echo, _same, _same),
        WAIT: Method(False, _wait, _same, _same),
        HOLD: Method(True, _hold, _same, _same),
    }
    async with serve(Calls(methods, MAX_MESSAGE, None), LIMITS) as served:
        yield served.port


async def connect(
    port: int, settings: dict[int, int] | None = None, preface: bytes | None = None
) -> Client:
    """A client that sent the preface and its SETTINGS, read the server's SETTINGS and acked
    them; with ``preface``, one that sent only those bytes and read nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = Client(reader, writer)
    if preface is not None:
        client.send(preface)
        return client
    client.send(f.PREFACE, f.settings(settings or {}))
    first = await client.frame()
    assert (first.kind, first.flags) == (f.SETTINGS, 0), first
    client.server_settings = dict(struct.iter_unpack(">HI", first.payload))
    client.send(f.SETTINGS_ACK)
    while (frame := await client.frame()).kind != f.SETTINGS:
        pass
    assert frame.flags & f.ACK
    return client


Case = Callable[[Client], Awaitable[None]]


def run(case: Case, settings: dict[int, int] | None = None, preface: bytes | None = None) -> None:
    async def main() -> None:
        async with server() as port:
            client = await connect(port, settings, preface)
            try:
                await case(client)
            finally:
                client.writer.close()

    asyncio.run(main())
