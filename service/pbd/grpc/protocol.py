"""gRPC's conventions on HTTP/2 (the gRPC-over-HTTP2 protocol) that are not a call's life:
the answer's headers, status trailers and their message encoding, ``grpc-timeout``, the
caller's metadata, the context a handler sees, and a streaming call's request iterator."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc

from pbd.h2 import frames as f
from pbd.h2.header_blocks import Fields
from pbd.h2.header_encoding import Block, Fixed
from pbd.h2.sending import Stream

ENCODINGS = b"identity,deflate,gzip"
# An answer's headers: :status 200; grpc-accept-encoding as grpc core sends it, and as the
# gRPC compression spec asks of an answer to a message in an encoding the server lacks.
# Indexed in the client's HPACK table once per connection (pbd.h2.header_encoding).
HEAD = Fixed(
    [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-accept-encoding", ENCODINGS),
    ]
)
OK = Fixed([(b"grpc-status", b"0")])
HEAD_BLOCK: Block = (HEAD, b"")
OK_TRAILERS: Block = (OK, b"")
OK_ONLY: Block = (Fixed([*HEAD.fields, *OK.fields]), b"")  # trailers-only, status OK
# grpc core clients refuse a header list over 16 KiB (their SETTINGS_MAX_HEADER_LIST_SIZE):
# a longer status message (a model's traceback, say) is cut to this many bytes.
MAX_STATUS_MESSAGE = 8192
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
# A grpc-timeout longer than this (about 30 years) is no deadline, as grpc core's overflow.
_NO_DEADLINE_S = 1e9
# Request headers that are transport, not the caller's metadata.
_NOT_METADATA = {b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding"}


class Abort(Exception):
    """Raised by ``context.abort``: the call ends with this status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def trailers(code: grpc.StatusCode, details: str) -> bytes:
    """The status trailers of an answer that is not OK, as literal header fields."""
    block = f.literal(b"grpc-status", str(code.value[0]).encode())
    if details:
        message = _percent_encode(details)
        if len(message) > MAX_STATUS_MESSAGE:
            cut = MAX_STATUS_MESSAGE - 3
            tail = message.rfind(b"%", cut - 2, cut)  # never half of a %XX escape
            message = message[: tail if tail >= 0 else cut] + b"..."
        block += f.literal(b"grpc-message", message)
    return block


def _percent_encode(text: str) -> bytes:
    """grpc-message: UTF-8, bytes outside printable ASCII and '%' as %XX."""
    out = bytearray()
    for byte in text.encode("utf-8", "replace"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def answer_status(stream: Stream, code: grpc.StatusCode, details: str) -> None:
    """A trailers-only answer: one HEADERS frame carrying the status, ending the stream."""
    stream.send_trailers((HEAD, trailers(code, details)))


def parse_timeout(value: bytes) -> float | None:
    """A ``grpc-timeout`` in seconds (None: so long it is no deadline). ValueError for a
    value grpc core (Triton) refuses: digits, optional spaces, then one unit letter."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit():  # bytes.isdigit: ASCII digits only
        digits = digits.rstrip(b" ")
        if unit is None or not digits.isdigit():
            raise ValueError(f"invalid grpc-timeout {value[:32].decode('latin-1')!r}")
    seconds = int(digits) * unit
    return None if seconds > _NO_DEADLINE_S else seconds


class Context:
    """What a handler sees of its call: the part of grpc.aio's ServicerContext pbd uses, and
    ``answer(body)``, which sends a unary call's answer (OK) before its handler returns (the
    handler then returns None), or, for a streaming call, ``send_now(body)``, which sends a
    message (serialized) at once from any callback, ahead of what the handler still yields:
    False when the client is too far behind to take it now (the caller then yields it, and
    the call waits for the client as for any message it yields)."""

    __slots__ = ("_headers", "_metadata", "answer", "send_now")

    def __init__(
        self,
        headers: Fields,
        answer: Callable[[bytes], None] | None = None,
        send_now: Callable[[bytes], bool] | None = None,
    ) -> None:
        self._headers = headers
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None
        self.answer = answer or _not_unary
        self.send_now = send_now or _not_streaming

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        if self._metadata is None:
            items: list[tuple[str, str | bytes]] = []
            for name, value in self._headers:
                if name.startswith(b":") or name in _NOT_METADATA:
                    continue
                key = name.decode("latin-1")
                if key.endswith("-bin"):
                    items.append((key, _unbase64(value)))
                else:
                    items.append((key, value.decode("latin-1")))
            self._metadata = tuple(items)
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise Abort(code, details)


def _not_unary(body: bytes) -> None:
    raise RuntimeError("only a unary call's handler can answer before it returns")


def _not_streaming(body: bytes) -> bool:
    raise RuntimeError("only a streaming call's handler can send a message by itself")


def _unbase64(value: bytes) -> bytes:
    """A ``-bin`` value, padded or not; one that is not base64 stays as sent rather than
    failing whichever handler reads the metadata."""
    try:
        return base64.b64decode(value + b"==")
    except binascii.Error:
        return value


# A request message's bytes: a copy, or the buffer it was read into (pbd.grpc.deframing).
Buffer = bytes | bytearray | memoryview
# A request message as it arrived: (compressed flag, its bytes).
Message = tuple[int, Buffer]


class Requests:
    """A streaming call's request messages, as an async iterator. ``drained`` runs when the
    handler has taken every message that arrived (the stream's receive window is credited
    again then: a handler that reads slowly slows its client down, not the server's memory)."""

    __slots__ = ("items", "ended", "waiter", "decode", "drained")

    def __init__(
        self, decode: Callable[[Message], Awaitable[Any]], drained: Callable[[], None]
    ) -> None:
        self.decode = decode
        self.drained = drained
        self.items: deque[Message] = deque()
        self.ended = False
        self.waiter: asyncio.Future[None] | None = None

    def __aiter__(self) -> Requests:
        return self

    async def __anext__(self) -> Any:
        while not self.items:
            if self.ended:
                raise StopAsyncIteration
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        message = self.items.popleft()
        if not self.items:
            self.drained()
        return await self.decode(message)

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
