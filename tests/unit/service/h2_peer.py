"""A raw HTTP/2 client for tests: frames written by hand over a real TCP connection to a real
``pbd.h2.connection.Connection`` served by asyncio on 127.0.0.1, with python-hyper's HPACK
for header blocks. No transport is mocked: what the server sees is what a socket delivers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from hpack import Decoder as HpackDecoder
from hpack import Encoder

from pbd.h2 import frames as f
from pbd.h2.connection import Connection, Shared
from pbd.h2.core import Application
from pbd.h2.header_blocks import Fields
from pbd.h2.header_encoding import Block
from pbd.h2.limits import Limits
from pbd.h2.sending import Stream

READ_TIMEOUT_S = 30.0  # only reached when a test fails
# The tests sync with PINGs (Peer.until_ping): no ping policing but where a test asks for it.
TEST_LIMITS = Limits(max_ping_strikes=0)


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes
    # The header list, on the frame that ends a header block (the peer decodes every block
    # as it arrives: the server's blocks refer to its earlier ones).
    fields: list[tuple[bytes, bytes]] | None = None

    @property
    def code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY."""
        offset = 4 if self.kind == f.GOAWAY else 0
        return int(struct.unpack_from(">I", self.payload, offset)[0])

    def __repr__(self) -> str:  # what a failed assertion shows
        names = {0: "DATA", 1: "HEADERS", 3: "RST_STREAM", 4: "SETTINGS", 6: "PING"}
        names.update({7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"})
        detail = f" code={self.code}" if self.kind in (f.RST_STREAM, f.GOAWAY) else ""
        detail += f" {self.payload[8:]!r}" if self.kind == f.GOAWAY else ""
        return f"{names.get(self.kind, self.kind)}[{self.stream}]{detail}"


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.encoder = Encoder()
        self.hpack = HpackDecoder()
        self.block = b""

    def send(self, *data: bytes) -> None:
        self.writer.write(b"".join(data))

    async def drain(self) -> None:
        await self.writer.drain()

    async def frame(self) -> Frame:
        head = await asyncio.wait_for(self.reader.readexactly(9), READ_TIMEOUT_S)
        high, low, kind, flags, stream = f.HEADER.unpack(head)
        payload = await asyncio.wait_for(self.reader.readexactly(high << 16 | low), READ_TIMEOUT_S)
        frame = Frame(kind, flags, stream & 0x7FFFFFFF, payload)
        if kind in (f.HEADERS, f.CONTINUATION):
            self.block += payload
            if flags & f.END_HEADERS:
                frame.fields = self.decode(self.block)
                self.block = b""
        return frame

    async def next(self, *kinds: int) -> Frame:
        """The next frame of one of ``kinds``, skipping others (SETTINGS, WINDOW_UPDATE...)."""
        while True:
            frame = await self.frame()
            if frame.kind in kinds:
                return frame

    async def until_ping(self, opaque: bytes = b"syncsync") -> list[Frame]:
        """Every frame the server sends before it answers a PING sent now. The server writes
        what a frame makes it write before it reads the next one, so this is all it had to
        say up to here."""
        self.send(f.frame(f.PING, 0, 0, opaque))
        frames = []
        while True:
            frame = await self.frame()
            if frame.kind == f.PING and frame.flags & f.ACK and frame.payload == opaque:
                return frames
            frames.append(frame)

    async def closed(self) -> list[Frame]:
        """Every frame up to the server's end of the connection."""
        frames = []
        while True:
            try:
                frames.append(await self.frame())
            except (asyncio.IncompleteReadError, ConnectionResetError):
                return frames

    def headers(
        self, stream: int, fields: list[tuple[bytes, bytes]], end_stream: bool = False
    ) -> bytes:
        block = self.encoder.encode(fields)
        flags = f.END_HEADERS | (f.END_STREAM if end_stream else 0)
        return f.frame(f.HEADERS, flags, stream, block)

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """Only for blocks in order: ``Frame.fields`` has each block the server sent."""
        return [(bytes(n), bytes(v)) for n, v in self.hpack.decode(block, raw=True)]


def request(path: bytes = b"/t/Echo", *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", b"test"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *extra,
    ]


@dataclass
class Served:
    port: int
    connections: list[Connection]


@contextlib.asynccontextmanager
async def serve(app: Application, limits: Limits = TEST_LIMITS) -> AsyncIterator[Served]:
    connections: list[Connection] = []
    shared = Shared(limits)

    def make() -> Connection:
        connection = Connection(app, lambda c: None, shared)
        connections.append(connection)
        return connection

    server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", 0)
    try:
        yield Served(server.sockets[0].getsockname()[1], connections)
    finally:
        server.close()
        for connection in connections:
            connection.close()
        await server.wait_closed()


async def connect(
    port: int, settings: dict[int, int] | None = None, handshake: bool = True
) -> Peer:
    """A client that sent its preface and SETTINGS; with ``handshake``, also read the server's
    SETTINGS and connection WINDOW_UPDATE, acknowledged them, and got its own acknowledged."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer = Peer(reader, writer)
    peer.send(f.PREFACE, f.settings(settings or {}))
    if handshake:
        first = await peer.frame()
        assert (first.kind, first.flags) == (f.SETTINGS, 0)
        peer.send(f.SETTINGS_ACK)
        assert (await peer.next(f.SETTINGS)).flags & f.ACK
    return peer


# -- an application that records, and a test runner over it --------------------------------

STATUS_200: Block = (None, f.header_block([(b":status", b"200")]))
TRAILERS: Block = (None, f.header_block([(b"grpc-status", b"0")]))


class Handler:
    def __init__(self, app: Recorder, stream: Stream, headers: Fields) -> None:
        self.app = app
        self.stream = stream
        self.headers = dict(headers)
        self.data = bytearray()
        self.ended = False
        self.reset = False

    def on_data(self, chunk: memoryview, end: bool) -> None:
        self.data += chunk
        if end:
            self.ended = True
            if self.app.answer is not None:
                self.stream.send_headers(STATUS_200)
                self.stream.send_data(self.app.body())
                self.stream.send_trailers(self.app.trailers)

    def room(self) -> memoryview | None:
        return None  # everything through on_data

    def wrote(self, n: int, end: bool) -> None:
        raise AssertionError("no room was offered")

    def on_reset(self) -> None:
        self.reset = True


class Recorder:
    """Records every stream; answers each complete request with ``answer`` bytes of DATA
    (``b"x"``, or with ``patterned`` the bytes 0-255 over and over: :func:`pattern`)."""

    def __init__(
        self, answer: int | None = 3, trailers: Block = TRAILERS, patterned: bool = False
    ) -> None:
        self.answer = answer
        self.trailers = trailers
        self.patterned = patterned
        self.handlers: dict[int, Handler] = {}

    def body(self) -> bytes:
        assert self.answer is not None
        return pattern(self.answer) if self.patterned else b"x" * self.answer

    def open(self, stream: Stream, headers: Fields) -> Handler:
        handler = Handler(self, stream, headers)
        self.handlers[stream.id] = handler
        return handler

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        stream.send_trailers((None, f.header_block([(b":status", b"431")])))


def pattern(size: int) -> bytes:
    """``size`` bytes in which a piece out of place shows."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


Test = Callable[[Peer, Recorder, list], Awaitable[None]]


def run(
    test: Test,
    app: Recorder | None = None,
    settings: dict[int, int] | None = None,
    limits: Limits = TEST_LIMITS,
) -> None:
    """``test(peer, app, connections)`` against a fresh server and connected client."""

    async def main() -> None:
        recorder = app or Recorder()
        async with serve(recorder, limits) as served:
            peer = await connect(served.port, settings)
            try:
                await test(peer, recorder, served.connections)
            finally:
                peer.writer.close()

    asyncio.run(main())


def data(frames: list[Frame], stream: int = 1) -> bytes:
    return b"".join(x.payload for x in frames if x.kind == f.DATA and x.stream == stream)


async def goaway(peer: Peer, code: int) -> Frame:
    frames = await peer.closed()
    assert frames and frames[-1].kind == f.GOAWAY, frames
    assert frames[-1].code == code, frames[-1].payload
    return frames[-1]


async def still_serving(peer: Peer, stream: int) -> None:
    peer.send(peer.headers(stream, request(), end_stream=True))
    frames = await peer.until_ping()
    assert data(frames, stream) == b"xxx"
    assert frames[-1].kind == f.HEADERS and frames[-1].flags & f.END_STREAM
