"""The HTTP port's connections: the calls made per request answered here, the rest by aiohttp.

aiohttp costs about 50 µs of CPU per call beyond what HTTP/1.1 itself needs
(``bench.http1_floor``), a quarter of the daemon's thread for a small infer call. So each
connection starts with :class:`Edge`, which reads requests itself and answers the routes a
client calls per request (infer; and health, model readiness, metadata and config, which
tritonclient.http asks on the same connection before it infers) through ``Routes``. At the
first request it does not answer itself, or does not read in full (another HTTP version, a
chunked or encoded body, ``Expect``, ``Upgrade``, a query, an escaped path, a bare LF or CR,
a head past the limit, an ``Accept-Encoding`` asking for gzip or deflate), it hands the
connection to aiohttp's protocol (``web.Server`` makes one per connection) with the bytes
read so far: aiohttp serves that request and every later one on it, as it served every
request before. So nothing the edge does not do is done worse than before; what it does (a
request line, header lines, a ``Content-Length`` body, keep-alive, ``Connection: close``,
requests sent before the previous answer came, a client that leaves mid-request cancelling
its request) it does as aiohttp does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pbd.errors import PbdError
from pbd.http.encoding import (
    Undecodable,
    answer_coding,
    compress_body,
    decode_body,
    refuse_encoding,
)
from pbd.http.status import JSON_CONTENT_TYPE, http_status

log = logging.getLogger("pbd.http")

MAX_HEAD_BYTES = 16384  # a longer request head goes to aiohttp (which refuses it: 431/400)
AHEAD_BYTES = 65536  # read ahead of the request being answered; more waits (pause_reading)
JOIN_BYTES = 65536  # a longer answer's body is written after its head, not joined to it
KEEPALIVE_S = 75.0  # aiohttp's keepalive_timeout: an idle connection is closed after it
# Headers whose presence means a request the edge does not read itself.
HANDED_OVER = frozenset((b"transfer-encoding", b"expect", b"upgrade"))
STATUS_TEXT = {
    200: b"OK",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    500: b"Internal Server Error",
}


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer: status, body, content type ("" for none), other headers."""

    status: int
    body: bytes = b""
    content_type: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Head:
    method: bytes
    path: str
    headers: dict[bytes, bytes]  # lower-cased names; a repeated name is handed over

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.lower().encode())
        return None if value is None else value.decode("latin-1")

    def raw_header(self, name: str) -> bytes | None:
        return self.headers.get(name.lower().encode())


# Answers a request the edge reads itself; None: not one of its routes (aiohttp's then).
Route = Callable[[Head, bytes], Awaitable[Reply]]
Routes = Callable[[Head], Route | None]


def json_reply(value: object, status: int = 200) -> Reply:
    """``value`` as JSON, with Triton's content type."""
    return Reply(status, json.dumps(value).encode(), JSON_CONTENT_TYPE)


def error_reply(error: PbdError) -> Reply:
    """Triton's error body, as the aiohttp routes send it."""
    body = json.dumps({"error": error.message}).encode()
    return Reply(http_status(error.code), body, JSON_CONTENT_TYPE)


def encode_head(reply: Reply, close: bool) -> bytes:
    """The answer's status line and headers, up to its blank line."""
    status = STATUS_TEXT.get(reply.status) or str(reply.status).encode()
    lines = [b"HTTP/1.1 %d %s" % (reply.status, status)]
    if reply.content_type:
        lines.append(b"Content-Type: " + reply.content_type.encode())
    for name, value in reply.headers:
        lines.append(f"{name}: {value}".encode("latin-1"))
    lines.append(b"Content-Length: %d" % len(reply.body))
    if close:
        lines.append(b"Connection: close")
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def encode_reply(reply: Reply, close: bool) -> bytes:
    return encode_head(reply, close) + reply.body


def write_reply(transport: asyncio.Transport, reply: Reply, close: bool, coding: str = "") -> None:
    """``reply`` on ``transport``, its body compressed in ``coding`` (gzip, deflate) when it
    has one: one write, or for a long body its head then the body, which is not copied once
    more to join them (a 1 MiB tensor)."""
    if coding and reply.body:
        body = compress_body(reply.body, coding)
        headers = (*reply.headers, ("Content-Encoding", coding))
        reply = Reply(reply.status, body, reply.content_type, headers)
    head = encode_head(reply, close)
    if len(reply.body) > JOIN_BYTES:
        transport.write(head)
        transport.write(reply.body)
    else:
        transport.write(head + reply.body)


# A request head the edge reads itself, whole: an upper-case method, an origin-form path of
# plain characters (no query, no escapes, no fragment), HTTP/1.1; then header lines, each a
# token, a colon, a value of visible characters, spaces and tabs (no CR, LF or other control:
# a bare CR or LF, a folded line, whitespace before the colon never match). One C-level
# match instead of a Python loop over the lines (the parse was a tenth of a call's cost).
_HEAD = re.compile(
    rb"([A-Z]+) (/[-!$&'()*+,./0-9:;=@A-Z_a-z~]*) HTTP/1\.1"
    rb"((?:\r\n[-!#$%&'*+.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*)*)"
)


def parse_head(raw: bytes) -> tuple[Head, int] | None:
    """The request head in ``raw`` (up to its blank line) and its body's length; None when
    the edge does not read this request itself."""
    match = _HEAD.fullmatch(raw)
    if match is None:
        return None  # aiohttp's parser decides what it means
    method, target, block = match.groups()
    pairs = [line.partition(b":") for line in block.split(b"\r\n")[1:]]
    headers = {name.lower(): value.strip(b" \t") for name, _, value in pairs}
    if len(headers) != len(pairs) or not HANDED_OVER.isdisjoint(headers):
        return None  # a name given twice, or a request the edge does not read
    connection = headers.get(b"connection", b"keep-alive").lower()
    if connection not in (b"keep-alive", b"close"):
        return None
    length = headers.get(b"content-length")
    if length is None:
        nbytes = 0
        if method == b"POST":
            return None
    elif not length.isdigit() or len(length) > 18:
        return None
    else:
        nbytes = int(length)
    return Head(method, target.decode("ascii"), headers), nbytes


@dataclass(slots=True)
class _Body:
    route: Route
    head: Head
    nbytes: int
    parts: list[bytes]
    have: int = 0


def _bare_lf(data: bytearray) -> bool:
    """A line of ``data`` ends with LF alone (the edge's requests end lines with CRLF)."""
    at = data.find(b"\n")
    while at >= 0:
        if at == 0 or data[at - 1] != 0x0D:
            return True
        at = data.find(b"\n", at + 1)
    return False


class Edge(asyncio.Protocol):
    """One connection of the HTTP port (see the module's docstring)."""

    def __init__(
        self,
        routes: Routes,
        aiohttp: Callable[[], asyncio.Protocol],
        max_body: int,
        edges: set[Edge],
    ) -> None:
        self.routes = routes
        self.aiohttp = aiohttp  # makes aiohttp's protocol for a connection
        self.max_body = max_body
        self.edges = edges  # every connection the edge still holds (counted, closed at stop)
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop  # from connection_made on
        self.buffer = bytearray()
        self.task: asyncio.Task[None] | None = None  # the request being answered
        self.closing = False  # the client said Connection: close, or the server stops
        self.paused = False
        # The connection is idle since (loop time), None while a request is being answered;
        # one timer looks at it when it could expire (``_idle_check``).
        self.idle_since: float | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.body: _Body | None = None  # the request whose body is still coming
        self.coding = ""  # the coding its answer goes in (Accept-Encoding: gzip or deflate)

    # -- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Kept: asyncio.get_running_loop() makes a getpid() system call each time on 3.11.
        self.loop = asyncio.get_running_loop()
        self.edges.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self.body is not None:  # a body still coming: its pieces are joined once, at the end
            self.body.parts.append(data)
            self.body.have += len(data)
            self._arm_idle()  # closed only when the body stops coming, not when it is long
            if self.body.have >= self.body.nbytes:
                self._body_complete()
            return
        self.buffer += data
        if self.task is None:
            self._next()
        elif len(self.buffer) > AHEAD_BYTES and not self.paused:
            assert self.transport is not None
            self.transport.pause_reading()  # a client far ahead of its answers waits
            self.paused = True

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost cancels what is running

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.edges.discard(self)
        self._stop_idle()
        if self.task is not None:
            self.task.cancel()  # the client left: its request is cancelled, as with aiohttp

    # -- requests ---------------------------------------------------------------------------------

    def _next(self) -> None:
        """Start on the next request in the buffer, if it is all here."""
        transport = self.transport
        if transport is None or self.task is not None:
            return
        if self.closing:
            transport.close()
            return
        end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
        if end < 0:
            if len(self.buffer) > MAX_HEAD_BYTES or _bare_lf(self.buffer):
                self._hand_over()  # too long, or lines ended some other way: aiohttp's
            return
        parsed = parse_head(bytes(self.buffer[:end]))
        route = None if parsed is None else self.routes(parsed[0])
        if parsed is None or route is None or parsed[1] > self.max_body:
            self._hand_over()
            return
        head, nbytes = parsed
        start = end + 4
        self.closing = head.headers.get(b"connection", b"").lower() == b"close"
        self._disarm_idle()
        if len(self.buffer) < start + nbytes:  # the body is still coming
            self.body = _Body(route, head, nbytes, [bytes(self.buffer[start:])])
            self.body.have = len(self.body.parts[0])
            self.buffer.clear()
            self._arm_idle()  # a body that stops coming holds the connection no longer
            return
        body = bytes(self.buffer[start : start + nbytes])
        del self.buffer[: start + nbytes]
        self._start(route, head, body)

    def _body_complete(self) -> None:
        pending, self.body = self.body, None
        assert pending is not None
        joined = b"".join(pending.parts)
        self.buffer += joined[pending.nbytes :]  # what the client sent after it
        self._start(pending.route, pending.head, joined[: pending.nbytes])

    def _start(self, route: Route, head: Head, body: bytes) -> None:
        self._disarm_idle()
        self.coding = answer_coding(head.headers.get(b"accept-encoding", b""))
        self.task = self.loop.create_task(self._answer(route, head, body))

    async def _answer(self, route: Route, head: Head, body: bytes) -> None:
        try:
            try:
                encoding = head.headers.get(b"content-encoding")
                if encoding is not None:
                    coding = refuse_encoding(encoding.decode("latin-1"))
                    body = decode_body(body, coding, self.max_body) if coding else body
                reply = await route(head, body)
            except PbdError as exc:
                reply = error_reply(exc)
            except Undecodable as exc:
                reply = json_reply({"error": exc.message}, exc.status)
                self.closing = True
        except asyncio.CancelledError:
            return  # the client left
        except Exception:
            log.exception("HTTP %s %s failed", head.method.decode(), head.path)
            reply = Reply(500, b"500 Internal Server Error\n\nServer got itself in trouble",
                          "text/plain; charset=utf-8")  # fmt: skip
            self.closing = True
        finally:
            self.task = None
        transport = self.transport
        if transport is None:
            return
        write_reply(transport, reply, self.closing, self.coding)
        if self.paused:
            self.paused = False
            transport.resume_reading()
        self._arm_idle()
        self._next()

    def _hand_over(self) -> None:
        """aiohttp serves this connection from here on, starting with what is buffered."""
        transport = self.transport
        assert transport is not None and self.task is None
        self._stop_idle()
        self.edges.discard(self)
        self.transport = None
        if self.paused:
            transport.resume_reading()
        protocol = self.aiohttp()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        buffered, self.buffer = bytes(self.buffer), bytearray()
        if buffered:
            protocol.data_received(buffered)

    # -- idle connections and stopping ------------------------------------------------------------

    def _arm_idle(self) -> None:
        """Idle from now: closed after KEEPALIVE_S unless a request comes. The timer is not
        moved for each request (a timer per request cost as much as parsing its head): it
        fires when the connection could first expire and looks again from there."""
        loop = self.loop
        self.idle_since = loop.time()
        if self.idle is None:
            self.idle = loop.call_at(self.idle_since + KEEPALIVE_S, self._idle_check)

    def _disarm_idle(self) -> None:
        """Busy: a request is being answered."""
        self.idle_since = None

    def _stop_idle(self) -> None:
        self.idle_since = None
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    def _idle_check(self) -> None:
        self.idle = None
        if self.transport is None:
            return
        loop = self.loop
        since = self.idle_since
        due = (loop.time() if since is None else since) + KEEPALIVE_S
        if since is not None and loop.time() >= due and self.task is None:
            self.transport.close()  # idle, or a request half-sent, for KEEPALIVE_S
            return
        self.idle = loop.call_at(due, self._idle_check)

    async def stop(self, timeout: float) -> None:
        """Answer the request being answered (within ``timeout``), then close."""
        self.closing = True
        task = self.task
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)
        if self.transport is not None:
            self.transport.close()
