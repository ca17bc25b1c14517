"""The protocol core of one HTTP/2 server connection, without I/O.

Bytes the client sent go in (:meth:`Core.receive`, or straight into a message's own buffer:
:meth:`Core.room` then :meth:`Core.wrote`); the application hears of each stream's events
(:class:`Application`, ``pbd.h2.sending.StreamHandler``); bytes to send come out, through
``sink`` or :meth:`Core.data_to_send`. The split is python-hyper h2's and Hypercorn's:
``pbd.h2.connection`` puts a core on an asyncio transport, and the tests drive one with bytes
alone. Python runs per stream event (a request's headers, a piece of its data, its end or
reset), never per header field.

Each ``receive`` is one pass over the frames in ``data``, parsed in place: a DATA payload is
handed to its stream as views of the caller's buffer (the stream copies what it keeps),
padding and frames of unknown types are skipped as they come, and only a partial frame header
or a partial control frame is kept back, its length checked first (at most a 64 KiB field
block: nothing the server would refuse is buffered whole). Everything written
while one read is handled leaves in one write at its end; what is written later (an answer)
leaves at once. A unary call's handler, started by the read that completed its request, runs
at the end of that read (:meth:`Sender.later`): a stream the same read reset never starts.

What the core holds the client to (RFC 9113, RFC 7541): the preface, then SETTINGS as the
first frame; frame sizes, and which frames go on stream 0; the stream states of section 5.1
(frames on idle streams are connection errors, DATA or HEADERS on closed ones stream errors,
late frames on streams the server reset are ignored); flow control on what the client sends,
its windows credited as the application takes the data (:meth:`Core.credit`); well-formed
header sections (``pbd.h2.fields``) within the advertised SETTINGS_MAX_HEADER_LIST_SIZE; and
the budgets of ``pbd.h2.limits``. A connection error writes GOAWAY, sets ``error`` and resets
every stream; the caller then closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from pbd.h2 import frames as f
from pbd.h2.fields import check_request, check_trailers
from pbd.h2.header_blocks import Decoder, Fields, HeaderListTooLarge
from pbd.h2.limits import DEFAULT_LIMITS, IDLE_PING_INTERVAL, Budget, Limits
from pbd.h2.sending import Sender, Stream, StreamHandler

# A DATA payload with at least this much left to come goes straight into its message.
DIRECT_MIN = 64 * 1024
# Stream ids a client skipped (never opened below a newer one) that are remembered: HEADERS
# on one of them is a connection error (section 5.1.1); on a forgotten one, STREAM_CLOSED.
SKIPPED_MEMORY = 16

PREFACE, FIRST_FRAME, OPEN = 0, 1, 2  # Core.stage
# Control frames of a fixed length (RFC 9113 section 6), checked before a payload is kept.
FIXED_LENGTHS = {f.PRIORITY: 5, f.RST_STREAM: 4, f.PING: 8, f.WINDOW_UPDATE: 4}
# Past these a frame is refused before it is kept: SETTINGS with more than 64 values (no
# client sends more than a few), GOAWAY with more than 16 KiB of debug data.
MAX_SETTINGS_LENGTH = 6 * 64
MAX_GOAWAY_LENGTH = 8 + 16 * 1024


class Application(Protocol):
    def open(self, stream: Stream, headers: Fields) -> StreamHandler | None:
        """A new request; None when the application has already answered it in full."""
        ...

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        """A request whose header list (``size`` bytes) is larger than the advertised
        ``limit``: answer it (its fields were not kept; any data it sends is dropped)."""
        ...


class Core(Sender):
    __slots__ = (
        "app", "limits", "clock", "decoder", "stage", "error", "partial", "partial_need",
        "data_stream", "data_left", "data_end", "skip_left", "direct", "block_stream", "block",
        "block_size", "block_end", "block_refused", "last_stream", "reads", "skipped",
        "recent_resets", "going_away", "recv_window", "recv_credit", "initial_recv",
        "settings_acked", "max_streams", "max_header_block", "stream_grant", "connection_grant",
        "settings_budget", "reset_budget", "empty_budget", "ping_strikes", "last_ping",
    )  # fmt: skip

    def __init__(
        self,
        app: Application,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.app = app
        self.limits = limits
        self.clock = clock
        self.decoder = Decoder(
            limits.max_header_list, limits.max_decoded_header_list, check_request
        )
        self.stage = PREFACE
        self.error: f.ProtocolError | None = None
        # A partial frame header or control frame, and how many bytes it needs to be whole.
        self.partial = bytearray()
        self.partial_need = 0
        # The DATA payload in progress: its stream (None: dropped), bytes left, END_STREAM.
        self.data_stream: Stream | None = None
        self.data_left = 0
        self.data_end = False
        self.skip_left = 0  # bytes of padding or of an ignored frame still to come
        self.direct: Stream | None = None  # the stream whose buffer the last read went into
        # A header block still waiting for CONTINUATION frames.
        self.block_stream = 0
        self.block: list[bytes] = []
        self.block_size = 0
        self.block_end = False
        self.block_refused = 0  # a stream error to answer once the block is decoded
        self.last_stream = 0
        self.reads = 0  # reads handled so far
        self.skipped: list[tuple[int, int]] = []
        self.recent_resets: dict[int, None] = {}
        self.going_away = False
        # Receive flow control: what the client may still send on the connection, what was
        # taken and not yet granted back, and the stream window it assumes for new streams
        # (the default until it acknowledges the server's SETTINGS).
        self.recv_window = limits.connection_window
        self.recv_credit = 0
        self.initial_recv = f.DEFAULT_WINDOW
        self.settings_acked = False
        self.max_streams = limits.max_streams
        self.max_header_block = limits.max_header_block
        self.stream_grant = limits.stream_window // 2
        self.connection_grant = limits.connection_window // 2
        now = clock()
        self.settings_budget = Budget(limits.settings_rate, now)
        self.reset_budget = Budget(limits.reset_rate, now)
        self.empty_budget = Budget(limits.empty_rate, now)
        self.ping_strikes = 0
        self.last_ping = -IDLE_PING_INTERVAL
        self.write(
            f.settings(
                {
                    f.MAX_CONCURRENT_STREAMS: limits.max_streams,
                    f.INITIAL_WINDOW_SIZE: limits.stream_window,
                    f.MAX_FRAME_SIZE: limits.max_frame,
                    f.ENABLE_PUSH: 0,
                    f.MAX_HEADER_LIST_SIZE: limits.max_header_list,
                }
            )
            + f.window_update(0, limits.connection_window - f.DEFAULT_WINDOW)
        )

    @property
    def handshaken(self) -> bool:
        """The client's preface and first SETTINGS are in."""
        return self.stage == OPEN

    # -- input --------------------------------------------------------------------------------

    def receive(self, data: bytes | memoryview) -> None:
        """Take bytes the client sent (``data`` may be reused once this returns)."""
        if self.error is not None:
            return
        self.receiving = True
        self.reads += 1
        try:
            self._receive(data)
            if self.after_read:
                self._run_after_read()
        except f.ProtocolError as exc:
            self._connection_error(exc)
        finally:
            self.receiving = False

    def room(self) -> memoryview | None:
        """Where the next read may go straight into a message's buffer (then call
        :meth:`wrote`), or None (then :meth:`receive` the bytes)."""
        self.direct = None
        stream = self.data_stream
        if self.data_left >= DIRECT_MIN and stream is not None and self.error is None:
            handler = stream.handler
            if handler is not None and not stream.remote_closed:
                room = handler.room()
                if room is not None and min(len(room), self.data_left) >= DIRECT_MIN:
                    self.direct = stream
                    return room[: self.data_left]
        return None

    def wrote(self, n: int) -> None:
        """``n`` bytes of the current DATA payload were read into :meth:`room`."""
        stream, self.direct = self.direct, None
        assert stream is not None
        self.receiving = True
        self.reads += 1
        try:
            self.data_left -= n
            end = self.data_left == 0 and self.data_end
            if end:
                stream.remote_closed = True
            if stream.handler is not None:
                stream.handler.wrote(n, end)
            self.credit(stream, n)
            if end and stream.local_closed:
                self.forget(stream)
            if self.after_read:
                self._run_after_read()
        except f.ProtocolError as exc:
            self._connection_error(exc)
        finally:
            self.receiving = False

    def lost(self) -> None:
        """The connection is gone: every open stream is reset."""
        self.failed = True
        self._reset_all()

    # -- ending the connection -----------------------------------------------------------------

    def go_away(self, code: int = f.NO_ERROR, reason: str = "") -> None:
        """No new streams (RFC 9113 section 6.8); the open ones finish."""
        if not self.going_away and self.error is None:
            self.going_away = True
            self.write(f.goaway(self.last_stream, code, reason.encode()[:200]))

    def close(self, code: int, reason: str) -> None:
        """End the connection now (a timeout): GOAWAY, then every stream is reset."""
        if self.error is None:
            self._connection_error(f.ProtocolError(reason, code))

    def _connection_error(self, exc: f.ProtocolError) -> None:
        self.error = exc
        self.out.append(f.goaway(self.last_stream, exc.code, str(exc).encode()[:200]))
        self.failed = True  # from now on nothing more is written
        self.after_read.clear()
        self._reset_all()

    def _reset_all(self) -> None:
        streams, self.streams = self.streams, {}
        self.stalled.clear()
        self.waiting.clear()
        for stream in streams.values():
            stream.local_closed = True
            if stream.handler is not None:
                stream.handler.on_reset()

    def _calm(self, what: str) -> None:
        raise f.ProtocolError(what, f.ENHANCE_YOUR_CALM)

    # -- frames --------------------------------------------------------------------------------

    def _receive(self, data: bytes | memoryview) -> None:
        if self.partial:
            # Appending keeps a frame that trickles in byte by byte linear, not quadratic.
            self.partial += data
            if len(self.partial) < self.partial_need:
                return
            data = bytes(self.partial)
            self.partial = bytearray()
        view = memoryview(data)
        n = len(data)
        pos = 0
        if self.stage == PREFACE:
            if n < len(f.PREFACE):
                if not f.PREFACE.startswith(bytes(data)):
                    raise f.ProtocolError("not an HTTP/2 client preface")
                self._keep(data, len(f.PREFACE))
                return
            if data[: len(f.PREFACE)] != f.PREFACE:
                raise f.ProtocolError("not an HTTP/2 client preface")
            self.stage = FIRST_FRAME
            pos = len(f.PREFACE)
        unpack = f.HEADER.unpack_from
        max_frame = self.limits.max_frame
        while pos < n:
            if self.data_left:
                take = min(self.data_left, n - pos)
                self.data_left -= take
                self._deliver(view[pos : pos + take], self.data_left == 0 and self.data_end)
                pos += take
                continue
            if self.skip_left:  # padding, or a frame that is ignored: never kept
                take = min(self.skip_left, n - pos)
                self.skip_left -= take
                pos += take
                continue
            if n - pos < f.HEADER_SIZE:
                self._keep(view[pos:], f.HEADER_SIZE)
                return
            high, low, kind, flags, stream_id = unpack(data, pos)
            length = high << 16 | low
            stream_id &= 0x7FFFFFFF
            if length > max_frame:
                raise f.ProtocolError(
                    "frame larger than SETTINGS_MAX_FRAME_SIZE", f.FRAME_SIZE_ERROR
                )
            if self.block_stream and kind != f.CONTINUATION:
                raise f.ProtocolError("header block interrupted")
            if self.stage == FIRST_FRAME and (kind != f.SETTINGS or flags & f.ACK):
                raise f.ProtocolError("the client's first frame is not SETTINGS")
            if kind == f.DATA:
                if flags & f.PADDED:
                    if n - pos < f.HEADER_SIZE + 1:  # the pad length is needed first
                        self._keep(view[pos:], f.HEADER_SIZE + 1)
                        return
                    self._padded_data(stream_id, flags, length, data[pos + f.HEADER_SIZE])
                    pos += f.HEADER_SIZE + 1
                else:
                    pos += f.HEADER_SIZE
                    self._data_frame(stream_id, length, length, bool(flags & f.END_STREAM))
                continue
            if kind == f.HEADERS or kind == f.CONTINUATION:
                if length > self.max_header_block:
                    self._calm("header block too large")
            elif self._skipped(kind, stream_id, length):
                pos += f.HEADER_SIZE
                self.skip_left = length
                continue
            if n - pos - f.HEADER_SIZE < length:
                self._keep(view[pos:], f.HEADER_SIZE + length)
                return
            payload = bytes(view[pos + f.HEADER_SIZE : pos + f.HEADER_SIZE + length])
            pos += f.HEADER_SIZE + length
            self._frame(kind, flags, stream_id, payload)

    def _skipped(self, kind: int, stream_id: int, length: int) -> bool:
        """Before a control frame's payload is kept: its length is checked, so that no frame
        the server would refuse is buffered whole first. True: skip the payload (a frame of
        an unknown type, a PRIORITY frame answered with a stream error)."""
        if kind > f.CONTINUATION:
            return True  # an unknown type: ignored (RFC 9113 section 5.5)
        fixed = FIXED_LENGTHS.get(kind)
        if fixed is not None and length != fixed:
            if kind == f.PRIORITY and stream_id:  # section 6.3: a stream error
                self._stream_error_on(stream_id, f.FRAME_SIZE_ERROR)
                return True
            if kind == f.PRIORITY:
                raise f.ProtocolError("PRIORITY on stream 0")
            raise f.ProtocolError(f"frame of type {kind} not {fixed} bytes", f.FRAME_SIZE_ERROR)
        if kind == f.SETTINGS and length > MAX_SETTINGS_LENGTH:
            self._calm("SETTINGS frame with too many values")
        elif kind == f.GOAWAY and length > MAX_GOAWAY_LENGTH:
            self._calm("GOAWAY debug data too long")
        elif kind == f.PUSH_PROMISE:
            raise f.ProtocolError("PUSH_PROMISE from a client")
        return False

    def _keep(self, rest: bytes | memoryview, need: int) -> None:
        self.partial = bytearray(rest)
        self.partial_need = need

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == f.HEADERS:
            self._headers_frame(stream_id, flags, payload)
        elif kind == f.CONTINUATION:
            self._continuation(stream_id, flags, payload)
        elif kind == f.SETTINGS:
            self._settings_frame(stream_id, flags, payload)
        elif kind == f.WINDOW_UPDATE:
            if stream_id and stream_id not in self.streams:
                self._not_idle(stream_id, "WINDOW_UPDATE")  # on a closed stream: ignored
            else:
                self.window_update(stream_id, payload)
        elif kind == f.PING:
            if stream_id:
                raise f.ProtocolError("PING on a stream")
            if not flags & f.ACK:
                self._ping()
                # After what the read's frames start (Sender.later): an ack then follows
                # every answer written for the frames before its PING, as it would without
                # the deferral; a client may use it to know the server is done with them.
                self.later(lambda: self.write(f.ping_ack(payload)))
        elif kind == f.RST_STREAM:
            self._rst_stream(stream_id, payload)
        elif kind == f.PRIORITY:
            self._priority(stream_id, payload)
        elif kind == f.GOAWAY:
            if stream_id:
                raise f.ProtocolError("GOAWAY on a stream")
            if len(payload) < 8:
                raise f.ProtocolError("GOAWAY shorter than 8 bytes", f.FRAME_SIZE_ERROR)
            self.going_away = True  # the client opens no more streams; the open ones finish

    # -- DATA ------------------------------------------------------------------------------------

    def _padded_data(self, stream_id: int, flags: int, length: int, pad: int) -> None:
        """A padded DATA frame, read as it comes: its data goes to its stream, then its
        padding is skipped (the pad length byte and the padding are taken at once)."""
        if not length:
            raise f.ProtocolError("padded frame without a pad length", f.FRAME_SIZE_ERROR)
        if pad >= length:
            raise f.ProtocolError("padding longer than the frame")
        self._data_frame(stream_id, length, length - 1 - pad, bool(flags & f.END_STREAM))
        self.credit(self.data_stream, 1 + pad)
        self.skip_left = pad

    def _data_frame(self, stream_id: int, length: int, data: int, end: bool) -> None:
        """A DATA frame's header: ``length`` bytes of payload (flow-controlled), ``data`` of
        them data (the rest padding). Its data follows (``data_left``)."""
        if not stream_id:
            raise f.ProtocolError("DATA on stream 0")
        if length > self.recv_window:
            raise f.ProtocolError("DATA beyond the connection window", f.FLOW_CONTROL_ERROR)
        self.recv_window -= length
        self.data_left = data
        self.data_end = end
        self.data_stream = None
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            self._stray(stream_id, stream, "DATA")
            return
        if length > stream.recv_window:
            self._stream_error(stream, f.FLOW_CONTROL_ERROR)
            return
        stream.recv_window -= length
        if stream.expect >= 0:
            stream.expect -= data
            if stream.expect < 0 or end and stream.expect:
                self._stream_error(stream, f.PROTOCOL_ERROR)  # section 8.1.1: content-length
                return
        self.data_stream = stream
        if not data:
            if not end and not self.empty_budget.spend(self.clock):
                self._calm("empty frames")
            self._deliver(memoryview(b""), end)

    def _deliver(self, chunk: memoryview, end: bool) -> None:
        stream = self.data_stream
        if stream is None or stream.remote_closed:
            self.credit(None, len(chunk))  # dropped: taken all the same
            return
        if end:
            stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.on_data(chunk, end)
        if chunk:
            if stream.remote_closed:  # (a request's last piece, mostly) the connection's only
                self.recv_credit += len(chunk)
                if self.recv_credit >= self.connection_grant:
                    self.credit(None, 0)
            else:
                self.credit(stream, len(chunk))
        if end and stream.local_closed:
            self.forget(stream)

    def credit(self, stream: Stream | None, n: int) -> None:
        """``n`` bytes received on ``stream`` (None: dropped, or padding) were taken: grant
        them back to the client once half a window is owed."""
        if stream is not None and not stream.remote_closed:
            if stream.holding:
                stream.held += n
                return
            stream.recv_credit += n
            if stream.recv_credit >= self.stream_grant:
                stream.recv_window += stream.recv_credit
                self.write(f.window_update(stream.id, stream.recv_credit))
                stream.recv_credit = 0
        self.recv_credit += n
        if self.recv_credit >= self.connection_grant:
            self.recv_window += self.recv_credit
            self.write(f.window_update(0, self.recv_credit))
            self.recv_credit = 0

    # -- header blocks -----------------------------------------------------------------------

    def _headers_frame(self, stream_id: int, flags: int, payload: bytes) -> None:
        if not stream_id:
            raise f.ProtocolError("HEADERS on stream 0")
        if flags & f.PADDED:
            payload = _unpad(payload)
        refused = 0
        if flags & f.PRIORITY_FLAG:
            if len(payload) < 5:
                raise f.ProtocolError("HEADERS too short for its priority", f.FRAME_SIZE_ERROR)
            if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
                refused = f.PROTOCOL_ERROR  # section 5.3.1: a stream cannot depend on itself
            payload = payload[5:]
        end = bool(flags & f.END_STREAM)
        if flags & f.END_HEADERS:
            self._header_block(stream_id, payload, end, refused)
        else:
            self.block_stream = stream_id
            self.block = [payload]
            self.block_size = len(payload)
            self.block_end = end
            self.block_refused = refused

    def _continuation(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != self.block_stream or not stream_id:
            raise f.ProtocolError("CONTINUATION without a header block")
        self.block.append(payload)
        self.block_size += f.HEADER_SIZE + len(payload)
        if self.block_size > self.max_header_block:
            self._calm("header block too large")
        if flags & f.END_HEADERS:
            block, self.block = b"".join(self.block), []
            self.block_stream = 0
            self._header_block(stream_id, block, self.block_end, self.block_refused)
        elif not payload and not self.empty_budget.spend(self.clock):
            self._calm("empty frames")

    def _header_block(self, stream_id: int, block: bytes, end: bool, refused: int) -> None:
        self.block_stream = 0
        stream = self.streams.get(stream_id)
        if stream is not None:
            self._trailers(stream, block, end, refused)
            return
        if stream_id <= self.last_stream or not stream_id & 1:
            self._decode_dropped(block)
            if not stream_id & 1:
                raise f.ProtocolError("HEADERS on an even stream id (the server's)")
            if any(low <= stream_id <= high for low, high in self.skipped):
                raise f.ProtocolError(f"HEADERS on stream {stream_id}, below a newer stream")
            self._stray(stream_id, None, "HEADERS")
            return
        if stream_id != self.last_stream + 2:
            self.skipped.append((self.last_stream + 2, stream_id - 2))
            del self.skipped[:-SKIPPED_MEMORY]
        self.last_stream = stream_id
        try:
            fields, (problem, length) = self.decoder.request(block)
        except HeaderListTooLarge as exc:
            self._oversized(stream_id, end, exc.size)
            return
        if refused or problem is not None or (end and length > 0):
            self._refuse(stream_id, refused or f.PROTOCOL_ERROR)
            return
        if self.going_away or len(self.streams) >= self.max_streams:
            # A flood of streams past the advertised limit counts; those a GOAWAY crossed not.
            self._refuse(stream_id, f.REFUSED_STREAM, counted=not self.going_away)
            return
        stream = Stream(
            self, stream_id, self.peer_initial_window, self.initial_recv, end, length, self.reads
        )
        self.streams[stream_id] = stream
        handler = stream.handler = self.app.open(stream, fields)
        if handler is not None and end:
            handler.on_data(memoryview(b""), True)
        if stream.local_closed and stream.remote_closed:
            self.forget(stream)

    def _oversized(self, stream_id: int, end: bool, size: int) -> None:
        """A request past SETTINGS_MAX_HEADER_LIST_SIZE: the application answers it."""
        if self.going_away or len(self.streams) >= self.max_streams:
            self._refuse(stream_id, f.REFUSED_STREAM, counted=not self.going_away)
            return
        stream = Stream(
            self, stream_id, self.peer_initial_window, self.initial_recv, end, -1, self.reads
        )
        self.streams[stream_id] = stream
        self.app.oversized(stream, size, self.limits.max_header_list)
        if stream.local_closed and stream.remote_closed:
            self.forget(stream)

    def _trailers(self, stream: Stream, block: bytes, end: bool, refused: int) -> None:
        """A header block on an open stream: the client's trailers, which end its request."""
        try:
            fields = self.decoder.decode(block)
        except HeaderListTooLarge:
            fields, refused = (), refused or f.PROTOCOL_ERROR
        if stream.remote_closed:  # section 5.1, half-closed (remote)
            self._stream_error(stream, f.STREAM_CLOSED)
        elif refused or not end or check_trailers(fields) is not None or stream.expect > 0:
            self._stream_error(stream, refused or f.PROTOCOL_ERROR)
        else:
            self.data_stream = stream
            self._deliver(memoryview(b""), True)

    def _decode_dropped(self, block: bytes) -> None:
        """A block the server ignores is decoded all the same: it may change the table."""
        try:
            self.decoder.decode(block)
        except HeaderListTooLarge:
            pass

    # -- streams not open --------------------------------------------------------------------

    def _not_idle(self, stream_id: int, what: str) -> None:
        """A frame that may not open a stream: on an idle one it is a connection error."""
        if stream_id > self.last_stream or not stream_id & 1:
            raise f.ProtocolError(f"{what} on idle stream {stream_id}")

    def _stray(self, stream_id: int, stream: Stream | None, what: str) -> None:
        """DATA or HEADERS on a stream that is not open for them: late frames on a stream
        the server reset are ignored; otherwise a stream error STREAM_CLOSED."""
        if stream is not None:  # half-closed (remote): the client already ended it
            self._stream_error(stream, f.STREAM_CLOSED)
            return
        self._not_idle(stream_id, what)
        if stream_id not in self.recent_resets:
            self._refuse(stream_id, f.STREAM_CLOSED)

    def _stream_error(self, stream: Stream, code: int) -> None:
        self.stream_error(stream, code)
        if not self.reset_budget.spend(self.clock):
            self._calm("too many stream errors")

    def _refuse(self, stream_id: int, code: int, counted: bool = True) -> None:
        """RST_STREAM on a stream that is not (or no longer) open."""
        self.write(f.rst_stream(stream_id, code))
        self._remember_reset(stream_id)
        if counted and not self.reset_budget.spend(self.clock):
            self._calm("too many stream errors")

    def reset_sent(self, stream: Stream) -> None:
        self.forget(stream)
        self._remember_reset(stream.id)

    def _remember_reset(self, stream_id: int) -> None:
        resets = self.recent_resets
        resets[stream_id] = None
        if len(resets) > self.limits.reset_memory:
            del resets[next(iter(resets))]

    def forget(self, stream: Stream) -> None:
        super().forget(stream)
        if stream.held:  # taken from the connection window all the same
            held, stream.held = stream.held, 0
            self.credit(None, held)

    # -- control frames ----------------------------------------------------------------------

    def _settings_frame(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id:
            raise f.ProtocolError("SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise f.ProtocolError("SETTINGS ack with a payload", f.FRAME_SIZE_ERROR)
            if not self.settings_acked:
                self._settings_acked()
            return
        if self.stage == FIRST_FRAME:
            self.stage = OPEN
        elif not self.settings_budget.spend(self.clock):
            self._calm("too many SETTINGS frames")
        self.peer_settings(payload)

    def _settings_acked(self) -> None:
        """The client took the server's SETTINGS: new streams get the advertised window, and
        the open ones grow to it."""
        self.settings_acked = True
        grown = self.limits.stream_window - self.initial_recv
        self.initial_recv = self.limits.stream_window
        for stream in self.streams.values():
            stream.recv_window += grown

    def _ping(self) -> None:
        """grpc core's ping policy (pbd.h2.limits.Limits)."""
        limits = self.limits
        if not limits.max_ping_strikes:
            return
        now = self.clock()
        if self.answered:
            self.answered = False
            self.ping_strikes = 0
        else:
            busy = self.streams or limits.pings_without_calls
            interval = limits.min_ping_interval if busy else IDLE_PING_INTERVAL
            if now - self.last_ping < interval:
                self.ping_strikes += 1
                if self.ping_strikes > limits.max_ping_strikes:
                    self._calm("too_many_pings")  # grpc clients know this debug text
        self.last_ping = now

    def _rst_stream(self, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise f.ProtocolError("RST_STREAM on stream 0")
        stream = self.streams.get(stream_id)
        if stream is None:
            self._not_idle(stream_id, "RST_STREAM")
            return  # closed already: nothing to do
        rapid = self._rapid(stream)
        stream.local_closed = stream.remote_closed = True
        self.forget(stream)
        if stream.handler is not None:
            stream.handler.on_reset()
        if rapid and not self.reset_budget.spend(self.clock):
            self._calm("too many streams reset before their answer (rapid reset)")

    def _rapid(self, stream: Stream) -> bool:
        """A reset that counts against the budget (CVE-2023-44487): before the answer began,
        and either in the read that opened the stream or before its request ended. A call
        the client gives up on later (its deadline, say) costs the server nothing a call
        does not, so it is not counted, however many there are."""
        if stream.responded:
            return False
        return stream.opened == self.reads or not stream.remote_closed

    def _priority(self, stream_id: int, payload: bytes) -> None:
        """PRIORITY (deprecated by RFC 9113, still checked): on any stream, even idle; its
        length was checked before it was kept (``_skipped``)."""
        if not stream_id:
            raise f.ProtocolError("PRIORITY on stream 0")
        if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
            self._stream_error_on(stream_id, f.PROTOCOL_ERROR)  # section 5.3.1

    def _stream_error_on(self, stream_id: int, code: int) -> None:
        """A stream error on ``stream_id``, open or not."""
        stream = self.streams.get(stream_id)
        if stream is not None:
            self._stream_error(stream, code)
        else:
            self._refuse(stream_id, code)

    def _run_after_read(self) -> None:
        callbacks, self.after_read = self.after_read, []
        for callback in callbacks:
            callback()


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise f.ProtocolError("padded frame without a pad length", f.FRAME_SIZE_ERROR)
    pad = payload[0]
    if pad >= len(payload):
        raise f.ProtocolError("padding longer than the frame")
    return payload[1 : len(payload) - pad]
