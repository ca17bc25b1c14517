"""The sending half of an HTTP/2 connection: streams as the application sees them, and flow
control on what the server sends (RFC 9113 section 5.2), with the client's SETTINGS and
WINDOW_UPDATE frames that govern it.

Outgoing DATA respects the client's connection and stream windows and its frame size, and
waits in the stream's queue (trailers behind it) until a WINDOW_UPDATE makes room. A stream
that waits is in one of two places: ``stalled`` when only the connection window holds it
back, ``waiting`` when its own window does. A connection WINDOW_UPDATE then resumes streams
from ``stalled`` only while the window lasts, a stream's WINDOW_UPDATE that stream alone, and
a SETTINGS frame the ``waiting`` streams only when it grows their windows: no control frame
costs work for streams it cannot move.

Output goes to ``sink`` at once, or, while the connection handles a read, into ``out``, which
leaves in one write at its end (``pbd.h2.core``). A large answer's frames (a frame header, then
a view of the message, for every frame) are written as one list (``write_parts``), never
joined: the connection sends such a list with one system call (``pbd.h2.connection``).
Header blocks are HPACK-encoded as they are written, in wire order
(``pbd.h2.header_encoding``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Protocol

from pbd.corks import BLOCKS, hold
from pbd.h2 import frames as f
from pbd.h2.header_encoding import Block, Encoder

# Above this many bytes, frames are written as a list (``write_parts``), not joined.
LARGE_WRITE = 65536

class StreamHandler(Protocol):
    def on_data(self, chunk: memoryview, end: bool) -> None:
        """The next piece of the request (a view of the connection's read buffer: copy what
        is kept); ``end``: the client's last."""
        ...

    def room(self) -> memoryview | None:
        """Where the connection may read the next bytes of a large message straight in, or
        None; then :meth:`wrote` says how many it put there."""
        ...

    def wrote(self, n: int, end: bool) -> None: ...

    def on_reset(self) -> None: ...


class Stream:
    """One request/response exchange. The application sends with ``send_headers``,
    ``send_data`` and ``send_trailers`` (or ``send_all``); order is kept behind flow control.

    Receiving, the stream's window is credited again as the application takes the data; a
    handler that cannot take more for now calls :meth:`hold`, and :meth:`release` once it
    can: what arrived meanwhile is credited then."""

    __slots__ = (
        "id", "conn", "handler", "send_window", "shift", "queue", "local_closed",
        "remote_closed", "responded", "recv_window", "recv_credit", "holding", "held",
        "expect", "opened", "on_drain", "queued",
    )  # fmt: skip

    def __init__(
        self,
        conn: Sender,
        stream_id: int,
        send_window: int,
        recv_window: int,
        remote_closed: bool = False,
        expect: int = -1,
        opened: int = 0,
    ) -> None:
        self.id = stream_id
        self.conn = conn
        self.handler: StreamHandler | None = None
        self.send_window = send_window
        self.shift = conn.window_shift  # see Sender.window_shift
        # Waiting for window: [payload, end_stream] DATA entries, or (block,) trailers.
        self.queue: deque[list[object]] = deque()
        self.queued = 0  # DATA bytes in ``queue``: what a slow reader makes us hold
        self.local_closed = False
        self.remote_closed = remote_closed
        self.responded = False  # the answer's first frame has left
        self.recv_window = recv_window  # what the client may still send on this stream
        self.recv_credit = 0  # taken by the application, not yet granted back
        self.holding = False
        self.held = 0
        self.expect = expect  # DATA bytes still due by content-length, or -1
        self.opened = opened  # the read that opened it (pbd.h2.core.Core.reads)
        self.on_drain: Callable[[], None] | None = None  # called when queued DATA leaves

    def send_headers(self, block: Block) -> None:
        if not self.local_closed:
            conn = self.conn
            self.responded = conn.answered = True
            conn.write(f.headers(self.id, conn.encoder.encode(block), False, conn.max_send_frame))

    def send_data(self, payload: bytes | memoryview, end: bool = False) -> None:
        if self.local_closed:
            return
        if not self.queue and self.conn.try_send_now(self, payload, end):
            return
        self.queue.append([payload, end])
        self.queued += len(payload)
        self.conn.pump(self)

    def send_trailers(self, block: Block) -> None:
        """The last frame: a HEADERS with END_STREAM (after any queued DATA)."""
        if self.local_closed:
            return
        if self.queue:
            self.queue.append([block])
            return
        conn = self.conn
        self.responded = conn.answered = True
        conn.write(f.headers(self.id, conn.encoder.encode(block), True, conn.max_send_frame))
        conn.closed_locally(self)

    def send_all(self, head: Block, prefix: bytes, body: bytes, trailers: Block) -> None:
        """A whole unary answer (headers, one message, trailers): one write when the windows
        allow, as they do for every small answer."""
        conn = self.conn
        conn.sync_window(self)
        size = len(prefix) + len(body)
        if (
            not self.local_closed
            and not self.queue
            and size <= conn.send_window
            and size <= self.send_window
            and size <= conn.max_send_frame
        ):
            conn.send_window -= size
            self.send_window -= size
            self.responded = conn.answered = True
            encode = conn.encoder.encode
            start = f.frame(f.HEADERS, f.END_HEADERS, self.id, encode(head))
            start += f.frame_header(f.DATA, 0, self.id, size) + prefix
            end = f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, self.id, encode(trailers))
            if len(body) > LARGE_WRITE:  # not joined: sent without a copy
                conn.write_parts([start, body, end])
            else:
                conn.write(start + body + end)
            conn.closed_locally(self)
            return
        self.send_headers(head)
        self.send_data(prefix)
        self.send_data(body)
        self.send_trailers(trailers)

    def reset(self, code: int = f.CANCEL) -> None:
        if not self.local_closed:
            self.conn.write(f.rst_stream(self.id, code))
            self.conn.reset_sent(self)

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        self.holding = False
        held, self.held = self.held, 0
        if held:
            self.conn.credit(self, held)


class Sender:
    """The connection's sending state; ``pbd.h2.core.Core`` adds the reading."""

    __slots__ = (
        "sink", "sink_parts", "streams", "failed", "send_window", "peer_initial_window",
        "window_shift", "max_send_frame", "encoder", "stalled", "waiting", "out", "receiving",
        "after_read", "answered", "corked",
    )  # fmt: skip

    def __init__(self) -> None:
        # Where frames go when they are written outside a read (None: kept for data_to_send).
        self.sink: Callable[[bytes | memoryview], None] | None = None
        # Where several buffers go, in order, as one write (set with ``sink``).
        self.sink_parts: Callable[[list[bytes | memoryview]], None] | None = None
        self.streams: dict[int, Stream] = {}
        self.failed = False  # after a connection error nothing more is written
        self.send_window = f.DEFAULT_WINDOW
        self.peer_initial_window = f.DEFAULT_WINDOW
        # The sum of SETTINGS_INITIAL_WINDOW_SIZE changes, applied to a stream's window when
        # the stream next sends: a SETTINGS frame costs O(1), not O(streams).
        self.window_shift = 0
        self.max_send_frame = f.DEFAULT_MAX_FRAME
        self.encoder = Encoder()
        self.stalled: dict[int, Stream] = {}  # waiting for the connection window only
        self.waiting: dict[int, Stream] = {}  # waiting for their own window
        self.out: list[bytes | memoryview] = []
        self.receiving = False
        self.after_read: list[Callable[[], None]] = []
        # The server sent HEADERS or DATA since the client's last PING (grpc core's ping
        # policy counts only pings that come while nothing is being answered).
        self.answered = False
        self.corked = False  # ``out`` leaves at the end of a block (``pbd.corks``)

    # -- the client's settings and windows --------------------------------------------------

    def peer_settings(self, payload: bytes) -> None:
        """A SETTINGS frame (not an ack): what it says about our sending, then the ack."""
        if len(payload) % 6:
            raise f.ProtocolError("SETTINGS length not a multiple of 6", f.FRAME_SIZE_ERROR)
        grown = False
        for key, value in struct.iter_unpack(">HI", payload):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise f.ProtocolError("initial window too large", f.FLOW_CONTROL_ERROR)
                grown = grown or value > self.peer_initial_window
                self.window_shift += value - self.peer_initial_window
                self.peer_initial_window = value
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise f.ProtocolError("bad SETTINGS_MAX_FRAME_SIZE")
                self.max_send_frame = value
            elif key == f.ENABLE_PUSH:
                if value > 1:
                    raise f.ProtocolError("SETTINGS_ENABLE_PUSH neither 0 nor 1")
            elif key == f.HEADER_TABLE_SIZE:
                self.encoder.resize(value)
        self.write(f.SETTINGS_ACK)
        if grown:
            self._windows_grown()

    def _windows_grown(self) -> None:
        """SETTINGS_INITIAL_WINDOW_SIZE grew every stream's window: none may pass the
        maximum (RFC 9113 section 6.9.2), and the streams waiting on theirs may send."""
        for stream in self.streams.values():
            if stream.send_window + self.window_shift - stream.shift > f.MAX_WINDOW:
                raise f.ProtocolError("a stream's window grew too large", f.FLOW_CONTROL_ERROR)
        waiting, self.waiting = self.waiting, {}
        for stream in waiting.values():
            self.pump(stream)

    def window_update(self, stream_id: int, payload: bytes) -> None:
        """A WINDOW_UPDATE on the connection or on a stream the caller knows to be open."""
        if len(payload) != 4:
            raise f.ProtocolError("WINDOW_UPDATE length not 4", f.FRAME_SIZE_ERROR)
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if not increment:
                raise f.ProtocolError("WINDOW_UPDATE of 0 on the connection")
            was = self.send_window
            self.send_window += increment
            if self.send_window > f.MAX_WINDOW:
                raise f.ProtocolError("connection window overflow", f.FLOW_CONTROL_ERROR)
            if was <= 0 < self.send_window:
                self._resume_stalled()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        self.sync_window(stream)
        stream.send_window += increment
        if not increment or stream.send_window > f.MAX_WINDOW:  # RFC 9113 sections 6.9, 6.9.1
            self.stream_error(stream, f.FLOW_CONTROL_ERROR if increment else f.PROTOCOL_ERROR)
            return
        if stream.queue:
            self.waiting.pop(stream.id, None)
            self.pump(stream)

    def _resume_stalled(self) -> None:
        while self.stalled and self.send_window > 0:
            stream = next(iter(self.stalled.values()))
            del self.stalled[stream.id]
            self.pump(stream)

    def stream_error(self, stream: Stream, code: int) -> None:
        """RFC 9113 section 5.4.2: RST_STREAM with ``code``, and the handler is told."""
        stream.reset(code)
        stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.on_reset()

    # -- writing ------------------------------------------------------------------------------

    def write(self, data: bytes | memoryview) -> None:
        """Frames made while a read is handled leave together at its end; others at once
        (an answer that waited for a call_soon to batch it cost a loop turn of latency and
        saved nothing measurable at 8 in flight)."""
        if self.failed:
            return
        if self.receiving or self.sink is None:
            self.out.append(data)
        elif BLOCKS:
            self.out.append(data)
            self._cork()
        else:
            self.sink(data)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """``parts`` in order, as one write (see the module's docstring)."""
        if self.failed:
            return
        if self.receiving or self.sink is None:
            self.out.extend(parts)
        elif BLOCKS:
            self.out.extend(parts)
            self._cork()
        else:
            assert self.sink_parts is not None  # set with ``sink`` (pbd.h2.connection)
            self.sink_parts(parts)

    def _cork(self) -> None:
        if not self.corked:
            self.corked = True
            hold(self)

    def uncork(self) -> None:
        """The end of a block (``pbd.corks``): what was written in it leaves, in one write."""
        self.corked = False
        out = self.take_out()
        if not out or self.failed or self.sink is None:
            return
        if len(out) == 1:
            self.sink(out[0])
        else:
            assert self.sink_parts is not None
            self.sink_parts(out)

    def later(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the read being handled is done (at once outside a read)."""
        if self.receiving:
            self.after_read.append(callback)
        else:
            callback()

    def data_to_send(self) -> bytes | memoryview:
        """What was written and not yet handed to the sink, as one buffer."""
        out, self.out = self.out, []
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def take_out(self) -> list[bytes | memoryview]:
        """What was written and not yet handed to the sink, unjoined."""
        out, self.out = self.out, []
        return out

    def sync_window(self, stream: Stream) -> None:
        if stream.shift != self.window_shift:
            stream.send_window += self.window_shift - stream.shift
            stream.shift = self.window_shift

    def try_send_now(self, stream: Stream, payload: bytes | memoryview, end: bool) -> bool:
        self.sync_window(stream)
        size = len(payload)
        if size > self.send_window or size > stream.send_window or size > self.max_send_frame:
            return False
        self.send_window -= size
        stream.send_window -= size
        stream.responded = self.answered = True
        head = f.frame_header(f.DATA, f.END_STREAM if end else 0, stream.id, size)
        if size > LARGE_WRITE:  # not joined: sent without a copy
            self.write_parts([head, payload])
        else:
            self.write(head + payload)
        if end:
            self.closed_locally(stream)
        return True

    def pump(self, stream: Stream) -> None:
        """Send what the windows allow of the stream's queue; park the stream where the
        windows stop it. The frames leave in one write."""
        self.sync_window(stream)
        parts: list[bytes | memoryview] = []
        try:
            self._pump(stream, parts)
        finally:
            if parts:
                stream.responded = self.answered = True
                if stream.on_drain is not None:
                    stream.on_drain()
            if sum(map(len, parts)) > LARGE_WRITE:
                self.write_parts(parts)  # not joined: sent without a copy
            elif parts:
                self.write(b"".join(parts))

    def _pump(self, stream: Stream, parts: list[bytes | memoryview]) -> None:
        queue = stream.queue
        while queue:
            entry = queue[0]
            if len(entry) == 1:  # trailers
                queue.popleft()
                block = self.encoder.encode(entry[0])  # type: ignore[arg-type]
                parts.append(f.headers(stream.id, block, True, self.max_send_frame))
                self.closed_locally(stream)
                return
            payload = memoryview(entry[0])  # type: ignore[arg-type]
            end = bool(entry[1])
            while True:
                room = min(self.send_window, stream.send_window, self.max_send_frame)
                size = len(payload)
                if size and room <= 0:
                    if stream.send_window <= 0:
                        self.waiting[stream.id] = stream
                    else:
                        self.stalled[stream.id] = stream
                    entry[0] = payload
                    return
                take = min(size, room)
                last = take == size
                self.send_window -= take
                stream.send_window -= take
                stream.queued -= take
                flags = f.END_STREAM if last and end else 0
                parts.append(f.frame_header(f.DATA, flags, stream.id, take))
                if take:
                    parts.append(payload[:take])
                payload = payload[take:]
                if last:
                    break
            queue.popleft()
            if end:
                self.closed_locally(stream)
                return

    def closed_locally(self, stream: Stream) -> None:
        stream.local_closed = True
        stream.queue.clear()
        stream.queued = 0
        if stream.remote_closed:
            self.forget(stream)
        else:
            # The answer is complete but the client is still sending: tell it to stop.
            self.write(f.rst_stream(stream.id, f.NO_ERROR))
            stream.remote_closed = True
            self.reset_sent(stream)

    def forget(self, stream: Stream) -> None:
        stream.local_closed = True
        self.streams.pop(stream.id, None)
        self.stalled.pop(stream.id, None)
        self.waiting.pop(stream.id, None)

    def reset_sent(self, stream: Stream) -> None:
        """The server reset ``stream``: frames the client had sent on it may still come."""
        self.forget(stream)

    def credit(self, stream: Stream | None, n: int) -> None:
        """``n`` bytes received on ``stream`` (None: on a stream gone) were taken."""
        raise NotImplementedError  # the receiving half's (pbd.h2.core.Core)
