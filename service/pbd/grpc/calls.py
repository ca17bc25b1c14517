"""gRPC calls on HTTP/2 streams (the gRPC-over-HTTP2 protocol): length-prefixed messages,
``grpc-timeout`` deadlines, ``grpc-encoding`` compression, status in trailers.

A call is one :class:`pbd.h2.sending.Stream`. A unary call's handler starts once its single
request message is in: in that read (at its end, so that a call the same read reset never
starts), up to where it first waits, then as a task (``pbd.grpc.eager``); it may send its
answer before it returns (``Context.answer``). A streaming call's handler starts at once as a
task and reads its requests from an async iterator fed as messages arrive; while messages wait
in it, the stream's receive window is not credited. Handlers have the shape grpc.aio's
have (``handler(request, context)``), and the context offers what pbd's servicer uses of
grpc.aio's: ``invocation_metadata()`` and ``abort(code, details)`` (``pbd.grpc.protocol``). A
client's RST_STREAM, a dropped connection or an expired deadline cancels the handler's task.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from pbd.grpc import eager
from pbd.grpc.deadlines import Deadlines
from pbd.grpc.deframing import Deframer, Reservations
from pbd.grpc.protocol import (
    ENCODINGS,
    HEAD,
    HEAD_BLOCK,
    OK_ONLY,
    OK_TRAILERS,
    Abort,
    Buffer,
    Context,
    Message,
    Requests,
    answer_status,
    parse_timeout,
    trailers,
)
from pbd.h2 import frames as f
from pbd.h2.header_blocks import Fields
from pbd.h2.sending import Stream
from pbd.responses import HELD_RESPONSE_OVERHEAD

log = logging.getLogger("pbd.grpc")


@dataclass(frozen=True)
class Method:
    streaming: bool  # stream-stream when True, unary-unary otherwise
    handler: Callable[..., Any]
    deserialize: Callable[[Buffer], Any]  # protobuf's FromString takes any buffer
    serialize: Callable[[Any], bytes]


class Call:
    """One RPC: deframes the request stream, runs the handler, writes the answer."""

    __slots__ = (
        "stream", "method", "context", "calls", "max_message", "encoding", "deframer",
        "request", "requests", "task", "timed", "expired", "done", "loop", "started",
    )  # fmt: skip

    def __init__(
        self,
        stream: Stream,
        method: Method,
        headers: Fields,
        calls: Calls,
        timeout: float | None,
        encoding: bytes,
    ) -> None:
        self.stream = stream
        self.method = method
        if method.streaming:
            self.context = Context(headers, send_now=self.send_now)
        else:
            self.context = Context(headers, self.answer)
        self.calls = calls
        self.max_message = calls.max_message
        self.encoding = encoding
        self.deframer = Deframer(calls.max_message, self._message, calls.reservations)
        self.request: Message | None = None
        self.requests: Requests | None = None
        self.task: asyncio.Task[None] | None = None
        self.timed = timeout is not None
        self.expired = False
        self.done = False
        self.started = False  # a streaming call's response headers have left
        loop = calls.loop
        assert loop is not None  # Calls.open has it
        self.loop = loop
        calls.active += 1
        if timeout is not None:
            calls.deadlines.add(loop, self, timeout, self._expire)
        if method.streaming:
            self.requests = Requests(self._decode, stream.release)
            self.task = loop.create_task(self._run_stream())

    # -- from the stream --------------------------------------------------------------------

    def on_data(self, chunk: memoryview, end: bool) -> None:
        if self.done:
            return
        try:
            if chunk:
                self.deframer.feed(chunk)
        except Abort as exc:
            self._finish_error(exc.code, exc.details)
            return
        requests = self.requests
        if requests is not None:
            if requests.items:
                self.stream.hold()  # credited again when the handler has taken them
            if end:
                requests.ended = True
                requests.wake()
        elif end:
            if self.deframer.pending:
                self._finish_error(grpc.StatusCode.INTERNAL, "Incomplete request message")
            elif self.request is None:
                self._finish_error(grpc.StatusCode.INTERNAL, "No request message")
            elif self.task is None:
                self.stream.conn.later(self._start_unary)

    def room(self) -> memoryview | None:
        """Where the connection may read the rest of a large message straight in."""
        return None if self.done else self.deframer.room()

    def wrote(self, n: int, end: bool) -> None:
        """``n`` bytes were read into :meth:`room`."""
        try:
            self.deframer.wrote(n)
        except Abort as exc:
            self._finish_error(exc.code, exc.details)
            return
        if end:
            self.on_data(memoryview(b""), True)

    def on_reset(self) -> None:
        if not self.done:
            self.done = True
            self._release()
            if self.task is not None:
                self.task.cancel()

    def _expire(self) -> None:
        self.timed = False
        if self.done:
            return
        self.expired = True
        if self.task is not None:
            self.task.cancel()
        else:
            self._finish_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    # -- messages ------------------------------------------------------------------------------

    def _message(self, flag: int, body: Buffer) -> None:
        if flag:
            self._inflater()  # an encoding pbd lacks fails the call now
        message = (flag, body)
        if self.requests is not None:
            self.requests.items.append(message)
            self.requests.wake()
        elif self.request is not None:
            raise Abort(grpc.StatusCode.UNIMPLEMENTED, "More than one request in a unary call")
        else:
            self.request = message

    async def _decode(self, message: Message) -> Any:
        """A request as the handler takes it. Inflating runs off the event loop: a message of
        a few MB may inflate to the size limit, tens of seconds of CPU."""
        flag, data = message
        if flag:
            data = await asyncio.to_thread(self._decompress, data)
        return self._deserialize(data)

    def _deserialize(self, data: Buffer) -> Any:
        try:
            return self.method.deserialize(data)
        except Exception:
            raise Abort(grpc.StatusCode.INTERNAL, "Exception deserializing request!") from None

    def _inflater(self) -> zlib._Decompress:
        if self.encoding == b"gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.encoding == b"deflate":
            return zlib.decompressobj()
        if self.encoding == b"identity":
            raise Abort(grpc.StatusCode.INTERNAL, "Compressed message without grpc-encoding")
        raise Abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"Compressed message with grpc-encoding '{self.encoding.decode('latin-1')}', "
            f"not one of {ENCODINGS.decode()}",
        )

    def _decompress(self, body: Buffer) -> bytes:
        try:
            data: bytes = self._inflater().decompress(body, self.max_message + 1)
        except zlib.error as exc:
            raise Abort(grpc.StatusCode.INTERNAL, f"Cannot decompress the message: {exc}") from None
        if len(data) > self.max_message:
            raise Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({len(data)} vs. {self.max_message})",
            )
        return data

    # -- running the handler -------------------------------------------------------------------

    def _start_unary(self) -> None:
        """Run the handler now, at the end of the read that completed its request, up to
        where it first waits (for ModelInfer: its Execute is on the way to the worker); a
        task takes it from there. Started as a task, it would run only on the loop's next
        turn, and the request would reach its worker that much later. It runs in a context
        of its own, as a task's coroutine does, and that context goes with it into the task.
        A call reset (or expired) before then never starts."""
        message, self.request = self.request, None
        if self.done or message is None:
            return
        # None: answered (or failed) without waiting for anything.
        self.task = eager.start(self.loop, self._run_unary(message))

    async def _run_unary(self, message: Message) -> None:
        method = self.method
        try:
            if message[0]:
                request = await self._decode(message)
            else:  # not compressed: no coroutine of its own (nearly every call)
                request = self._deserialize(message[1])
            response = await method.handler(request, self.context)
            body = None if response is None else method.serialize(response)
        except Abort as exc:
            self._finish_error(exc.code, exc.details)
        except asyncio.CancelledError:
            self._cancelled()
        except Exception as exc:
            self._unexpected(exc)
        else:
            if body is not None:
                self.answer(body)
            elif not self.done:
                self._finish_error(grpc.StatusCode.INTERNAL, "The handler returned no answer")

    def answer(self, body: bytes) -> None:
        """Answer the unary call with ``body`` (status OK), maybe before its handler returns
        (``Context.answer``); nothing if it is answered or over already."""
        if not self.done:
            self.done = True
            self._release()
            self.stream.send_all(HEAD_BLOCK, len(body).to_bytes(5, "big"), body, OK_TRAILERS)

    async def _run_stream(self) -> None:
        stream = self.stream
        try:
            async for response in self.method.handler(self.requests, self.context):
                if self.done:
                    return
                self._send(self.method.serialize(response))
                limit = self.calls.stream_buffer
                if limit and stream.queue and _held(stream) > limit:
                    await self._drained(limit)
        except Abort as exc:
            self._finish_error(exc.code, exc.details, self.started)
        except asyncio.CancelledError:
            self._cancelled(self.started)
        except Exception as exc:
            self._unexpected(exc, self.started)
        else:
            if not self.done:
                self.done = True
                self._release()
                stream.send_trailers(OK_TRAILERS if self.started else OK_ONLY)

    def send_now(self, body: bytes) -> bool:
        """``Context.send_now``: ``body`` leaves now unless the client is behind by more
        than the stream buffer (what the handler yields then waits for it, in order). A call
        that is over drops it (True: nothing to yield)."""
        if self.done:
            return True
        limit = self.calls.stream_buffer
        stream = self.stream
        if limit and stream.queue and _held(stream) > limit:
            return False
        self._send(body)
        return True

    def _send(self, body: bytes) -> None:
        stream = self.stream
        if not self.started:
            stream.send_headers(HEAD_BLOCK)
            self.started = True
        stream.send_data(len(body).to_bytes(5, "big") + body)

    async def _drained(self, limit: int) -> None:
        """Wait until no more than ``limit`` bytes of the stream wait for the client's window
        (a client that reads slowly holds its handler back, not the server's memory)."""
        stream = self.stream
        loop = asyncio.get_running_loop()
        try:
            while not self.done and stream.queue and _held(stream) > limit:
                sent: asyncio.Future[None] = loop.create_future()
                stream.on_drain = functools.partial(_wake, sent)
                await sent
        finally:
            stream.on_drain = None

    def _cancelled(self, started: bool = False) -> None:
        if self.expired:
            self._finish_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", started)
        elif not self.done:  # cancelled by shutdown
            self._finish_error(grpc.StatusCode.CANCELLED, "Cancelled", started)

    def _unexpected(self, exc: Exception, started: bool = False) -> None:
        log.error("unexpected error in a gRPC handler", exc_info=exc)
        self._finish_error(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}", started)

    def _finish_error(self, code: grpc.StatusCode, details: str, started: bool = False) -> None:
        if self.done:
            return
        self.done = True
        self._release()
        block = trailers(code, details)
        started = started or self.started  # headers sent by send_now count too
        self.stream.send_trailers((None, block) if started else (HEAD, block))
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    def _release(self) -> None:
        """The call is over. Its stream, deframer and context let go of it: each held the
        call (the stream's handler, the deframer's callback, the context's ``answer``) as the
        call holds them, and such a cycle outlives the call until the cyclic garbage collector
        finds it, which under load made the collector run every few dozen calls. Freed by
        reference counting instead, a call leaves nothing for it."""
        self.calls.active -= 1
        self.deframer.close()
        if self.timed:
            self.timed = False
            self.calls.deadlines.discard(self)
        self.stream.handler = None
        self.context.answer = _over


def _held(stream: Stream) -> int:
    """What the messages waiting in ``stream`` for the client's window count against its
    buffer: their bytes, and the overhead of each (``pbd.responses.held_cost``)."""
    return stream.queued + len(stream.queue) * HELD_RESPONSE_OVERHEAD


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _over(body: bytes) -> None:
    """``Context.answer`` once the call is over: nothing to send (as ``Call.answer``)."""


class Calls:
    """The gRPC application on HTTP/2 connections: routes a request's ``:path`` to its method."""

    def __init__(
        self,
        methods: dict[bytes, Method],
        max_message: int,
        max_calls: int | None,
        stream_buffer: int = 0,
    ) -> None:
        self.methods = methods
        self.max_message = max_message
        self.max_calls = max_calls
        # A streaming call stops taking responses from its handler while more than this many
        # bytes wait for the client's window (0: no limit).
        self.stream_buffer = stream_buffer
        self.active = 0
        self.accepting = True
        self.reservations = Reservations()
        self.deadlines = Deadlines()
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop of the first call

    def open(self, stream: Stream, headers: Fields) -> Call | None:
        path = b""
        content_type = b""
        method_name = b""
        timeout: float | None = None
        bad_timeout = b""
        encoding = b"identity"
        for name, value in headers:
            if name == b":path":
                path = value
            elif name == b"content-type":
                content_type = value
            elif name == b":method":
                method_name = value
            elif name == b"grpc-timeout":
                try:
                    timeout = parse_timeout(value)
                except ValueError:
                    bad_timeout = value or b" "
            elif name == b"grpc-encoding":
                encoding = value
        if not content_type.startswith(b"application/grpc"):
            stream.send_trailers((None, f.literal(b":status", b"415")))
            return None
        if method_name != b"POST":  # grpc core's answer (Triton's), with what came instead
            shown = method_name.decode("latin-1")
            answer_status(stream, grpc.StatusCode.UNKNOWN, f"Bad method header {shown!r}: not POST")
            return None
        if bad_timeout:  # grpc core resets such a stream (INTERNAL_ERROR: the status INTERNAL)
            shown = bad_timeout.strip().decode("latin-1")
            answer_status(
                stream,
                grpc.StatusCode.INTERNAL,
                f"Invalid grpc-timeout {shown!r}: digits, then H, M, S, m, u or n",
            )
            return None
        method = self.methods.get(path)
        if method is None:
            answer_status(stream, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return None
        if not self.accepting:
            answer_status(stream, grpc.StatusCode.UNAVAILABLE, "Server is shutting down")
            return None
        if self.max_calls is not None and self.active >= self.max_calls:
            answer_status(
                stream, grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!"
            )
            return None
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        return Call(stream, method, headers, self, timeout, encoding)

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        """Headers past SETTINGS_MAX_HEADER_LIST_SIZE: Triton's status (grpc core answers
        UNAVAILABLE, then serves nothing more on the connection; pbd goes on serving it)."""
        answer_status(
            stream,
            grpc.StatusCode.UNAVAILABLE,
            f"The request's header list ({size} bytes) is larger than the server's limit "
            f"({limit} bytes, SETTINGS_MAX_HEADER_LIST_SIZE; --grpc-max-header-list-bytes)",
        )
