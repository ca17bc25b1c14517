"""Driving ``pbd.grpc.calls`` over a real pbd.h2 connection with the raw-frame client
(h2_peer): a server for a table of methods, one call at a time, its answer parsed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from urllib.parse import unquote_to_bytes

import grpc
from h2_peer import Frame, Peer, connect, request, serve

from pbd.grpc.calls import Calls, Method
from pbd.grpc.protocol import Context
from pbd.h2 import frames as f


def same(data: bytes) -> bytes:
    return data


def unary(handler: Callable[[bytes, Context], Awaitable[bytes | None]]) -> Method:
    """A unary method on raw bytes both ways."""
    return Method(False, handler, same, same)


async def echo(request: bytes, context: Context) -> bytes:
    return request


async def abort(request: bytes, context: Context) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.decode())


def run_calls(
    methods: dict[bytes, Method],
    test: Callable[[Peer, Calls], Awaitable[None]],
    max_message: int = 2**31 - 1,
    max_calls: int | None = None,
) -> None:
    async def main() -> None:
        calls = Calls(methods, max_message, max_calls)
        async with serve(calls) as served:
            peer = await connect(served.port, {f.INITIAL_WINDOW_SIZE: 1 << 24})
            peer.send(f.window_update(0, 1 << 30))
            try:
                await test(peer, calls)
            finally:
                peer.writer.close()

    asyncio.run(main())


def message(body: bytes, compressed: bool = False) -> bytes:
    return bytes([compressed]) + len(body).to_bytes(4, "big") + body


class Answer:
    def __init__(self, peer: Peer, frames: list[Frame]) -> None:
        self.blocks = [x.fields for x in frames if x.fields is not None]
        self.ended = bool(frames) and frames[-1].kind == f.HEADERS
        body = b"".join(x.payload for x in frames if x.kind == f.DATA)
        self.messages = []
        while body:
            length = int.from_bytes(body[1:5], "big")
            self.messages.append(body[5 : 5 + length])
            body = body[5 + length :]

    @property
    def status(self) -> tuple[int, str]:
        trailers = dict(self.blocks[-1])
        message = unquote_to_bytes(trailers.get(b"grpc-message", b"")).decode()
        return int(trailers[b"grpc-status"]), message


async def answer(peer: Peer, stream: int) -> Answer:
    frames = []
    while not (frames and frames[-1].kind == f.HEADERS and frames[-1].flags & f.END_STREAM):
        frame = await peer.frame()
        if frame.stream == stream:
            frames.append(frame)
    return Answer(peer, frames)


async def call(peer: Peer, path: bytes, *data: bytes, stream: int = 1, extra: tuple = ()) -> Answer:
    wire = [peer.headers(stream, request(path, *extra), end_stream=not data)]
    for i, chunk in enumerate(data):
        wire.append(f.frame(f.DATA, f.END_STREAM if i == len(data) - 1 else 0, stream, chunk))
    peer.send(*wire)
    return await answer(peer, stream)


def code(status: grpc.StatusCode) -> int:
    return int(status.value[0])
