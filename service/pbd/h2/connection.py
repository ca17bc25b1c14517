"""One HTTP/2 server connection on an asyncio transport.

The connection is an ``asyncio.BufferedProtocol``: the transport reads into the connection's
own buffer, and each read is one pass over the frames in it; a DATA payload is handed to its
stream piece by piece as views of that buffer (the stream copies what it keeps), and only a
partial frame header or a partial control frame is kept back. While a large message's DATA
is coming, the transport reads straight into the message's own buffer instead
(``StreamHandler.room``): a 16 MiB request is copied once, by the kernel. Everything written
while one read is handled leaves in one ``write`` at its end; an answer written later (a
unary response's HEADERS, DATA and trailers) leaves at once.

Flow control (RFC 9113 section 5.2): the server opens large receive windows and tops them up
as the application takes data, so a client never waits for a window update on a large
request. Sending, and the client's windows, are :class:`pbd.h2.sending.Sender`'s half.

The application sees streams through :class:`Application`: ``open`` when a request's header
block is complete, then the stream's handler gets its data and, if the client resets the
stream or the connection drops, ``on_reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Protocol

from pbd.h2 import frames as f
from pbd.h2.header_blocks import Decoder, Fields
from pbd.h2.sending import Sender, Stream, StreamHandler

log = logging.getLogger("pbd.h2")

# Receive windows the server opens: per stream (SETTINGS_INITIAL_WINDOW_SIZE) and for the
# connection. Topped up once half is used; memory per call is bounded by the gRPC layer's
# message-size limit, not by these.
STREAM_WINDOW = 16 * 1024 * 1024
CONNECTION_WINDOW = 64 * 1024 * 1024
MAX_RECV_FRAME = 1024 * 1024
# What one read takes into the connection's own buffer (asyncio reads 256 KiB by default).
READ_SIZE = 256 * 1024
# A DATA payload with at least this much left to come goes straight into its message.
DIRECT_MIN = 64 * 1024
# A request's header block (HEADERS plus CONTINUATION) larger than this ends the connection;
# each frame counts its 9-byte header too, so a flood of empty CONTINUATION frames ends it.
MAX_HEADER_BLOCK = 64 * 1024
# Open streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS). A stream counts until its
# answer has left, so a client that never reads holds at most this many answers in memory.
MAX_STREAMS = 1024
# After a connection error, how long input is read and dropped before the socket is closed.
CLOSE_LINGER_S = 1.0


class Application(Protocol):
    def open(self, stream: Stream, headers: Fields) -> StreamHandler | None:
        """A new request; None when the application has already answered it in full."""
        ...


class Connection(Sender, asyncio.BufferedProtocol):
    def __init__(self, app: Application, on_lost: Callable[[Connection], None]) -> None:
        super().__init__()
        self.app = app
        self.on_lost = on_lost
        self.decoder = Decoder(MAX_HEADER_BLOCK)
        self.preface = False
        # A partial frame header or control frame, and how many bytes it needs to be whole.
        self.partial = bytearray()
        self.partial_need = 0
        # A DATA payload that continues in the next read: its stream id, bytes left, END_STREAM.
        self.data_stream = 0
        self.data_left = 0
        self.data_end = False
        # A header block still waiting for CONTINUATION frames.
        self.block_stream = 0
        self.block: list[bytes] = []
        self.block_size = 0
        self.block_end = False
        self.last_stream = 0
        self.going_away = False
        self.recv_unacked = 0
        self.read_buffer = memoryview(bytearray(READ_SIZE))
        self.direct: Stream | None = None  # the stream whose buffer the last read went into

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Kept: asyncio.get_running_loop() makes a getpid() system call each time on 3.11.
        self.loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A vanished client's connection (and any call it left open) is found by the
            # kernel's keepalive probes (2 h idle by default, as grpc core's server pings).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        transport.write(
            f.settings(
                {
                    f.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                    f.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                    f.MAX_FRAME_SIZE: MAX_RECV_FRAME,
                    f.ENABLE_PUSH: 0,
                }
            )
            + f.window_update(0, CONNECTION_WINDOW - f.DEFAULT_WINDOW)
        )

    def pause_writing(self) -> None:
        # The client does not read what we write (answers, PING and SETTINGS acks): stop
        # reading what makes more, so the buffer stays near its high-water mark.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._reset_all()
        self.on_lost(self)

    def _reset_all(self) -> None:
        streams, self.streams = self.streams, {}
        self.blocked.clear()
        for stream in streams.values():
            stream.local_closed = True
            if stream.handler is not None:
                stream.handler.on_reset()

    # -- reading: the transport reads into our buffer, or straight into a message's ---------

    def get_buffer(self, sizehint: int) -> memoryview:
        self.direct = None
        if self.data_left >= DIRECT_MIN and not self.failed:
            stream = self.streams.get(self.data_stream)
            handler = stream.handler if stream is not None else None
            if stream is not None and handler is not None and not stream.remote_closed:
                room = handler.room()
                if room is not None and min(len(room), self.data_left) >= DIRECT_MIN:
                    self.direct = stream
                    return room[: self.data_left]
        return self.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.failed:
            return
        stream, self.direct = self.direct, None
        self.receiving = True
        try:
            if stream is None:
                self._receive(self.read_buffer[:nbytes])
            else:
                self._wrote(stream, nbytes)
        except f.ProtocolError as exc:
            log.debug("HTTP/2 connection error: %s", exc)
            self.write(f.goaway(self.last_stream, exc.code, str(exc).encode()[:200]))
            self._flush()
            self._fail()
            return
        finally:
            self.receiving = False
        if self.recv_unacked >= CONNECTION_WINDOW // 2:
            self.write(f.window_update(0, self.recv_unacked))
            self.recv_unacked = 0
        if self.out:
            self._flush()

    def _wrote(self, stream: Stream, nbytes: int) -> None:
        """``nbytes`` of the current DATA payload were read into the stream's own buffer."""
        self.data_left -= nbytes
        end = self.data_left == 0 and self.data_end
        if end:
            stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.wrote(nbytes, end)
        if end and stream.local_closed:
            self.forget(stream)

    def _fail(self) -> None:
        """Close after a connection error so that the GOAWAY arrives: closing a socket with
        unread input resets it and the peer may lose what was sent. So the write side is shut
        and input discarded for a moment first, where the transport can (TLS cannot)."""
        self.failed = True  # from now on nothing more is written
        self._reset_all()
        transport = self.transport
        if transport is None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        asyncio.get_running_loop().call_later(CLOSE_LINGER_S, transport.close)

    # -- reading -----------------------------------------------------------------------------

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
        if not self.preface:
            if n < len(f.PREFACE):
                if not f.PREFACE.startswith(bytes(data)):
                    raise f.ProtocolError("not an HTTP/2 client preface")
                self._keep(data, len(f.PREFACE))
                return
            if data[: len(f.PREFACE)] != f.PREFACE:
                raise f.ProtocolError("not an HTTP/2 client preface")
            self.preface = True
            pos = len(f.PREFACE)
        unpack = f.HEADER.unpack_from
        while pos < n:
            if self.data_left:
                take = min(self.data_left, n - pos)
                self.data_left -= take
                self._deliver(view[pos : pos + take], self.data_left == 0 and self.data_end)
                pos += take
                continue
            if n - pos < f.HEADER_SIZE:
                self._keep(view[pos:], f.HEADER_SIZE)
                return
            high, low, kind, flags, stream_id = unpack(data, pos)
            length = high << 16 | low
            stream_id &= 0x7FFFFFFF
            if length > MAX_RECV_FRAME:
                raise f.ProtocolError(
                    "frame larger than SETTINGS_MAX_FRAME_SIZE", f.FRAME_SIZE_ERROR
                )
            if self.block_stream and kind != f.CONTINUATION:
                raise f.ProtocolError("header block interrupted")
            if kind == f.DATA and not flags & f.PADDED:
                pos += f.HEADER_SIZE
                self._data_frame(stream_id, length, bool(flags & f.END_STREAM))
                continue
            if n - pos - f.HEADER_SIZE < length:
                self._keep(view[pos:], f.HEADER_SIZE + length)
                return
            payload = bytes(view[pos + f.HEADER_SIZE : pos + f.HEADER_SIZE + length])
            pos += f.HEADER_SIZE + length
            self._frame(kind, flags, stream_id, payload)

    def _keep(self, rest: bytes | memoryview, need: int) -> None:
        self.partial = bytearray(rest)
        self.partial_need = need

    def _data_frame(self, stream_id: int, length: int, end: bool) -> None:
        if stream_id == 0:
            raise f.ProtocolError("DATA on stream 0")
        if stream_id > self.last_stream or not stream_id & 1:
            raise f.ProtocolError(f"DATA on stream {stream_id}, which was never opened")
        self.recv_unacked += length
        self.data_stream = stream_id
        self.data_end = end
        self.data_left = length
        stream = self.streams.get(stream_id)
        if stream is not None and not end:
            stream.recv_unacked += length
            if stream.recv_unacked >= STREAM_WINDOW // 2:
                self.write(f.window_update(stream_id, stream.recv_unacked))
                stream.recv_unacked = 0
        if length == 0:
            self._deliver(memoryview(b""), end)

    def _deliver(self, chunk: memoryview, end: bool) -> None:
        stream = self.streams.get(self.data_stream)
        if stream is None or stream.remote_closed:
            return  # a stream already answered or reset: its data is dropped
        if end:
            stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.on_data(chunk, end)
        if end and stream.local_closed:
            self.forget(stream)

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == f.HEADERS:
            if flags & f.PADDED:
                payload = _unpad(payload)
            if flags & f.PRIORITY_FLAG:
                payload = payload[5:]
            self._headers_frame(stream_id, flags, payload)
        elif kind == f.CONTINUATION:
            if stream_id != self.block_stream or not stream_id:
                raise f.ProtocolError("CONTINUATION without a header block")
            self.block.append(payload)
            self.block_size += f.HEADER_SIZE + len(payload)
            if self.block_size > MAX_HEADER_BLOCK:
                raise f.ProtocolError("header block too large", f.ENHANCE_YOUR_CALM)
            if flags & f.END_HEADERS:
                self._header_block(stream_id, b"".join(self.block), self.block_end)
        elif kind == f.DATA:  # padded DATA: whole in one piece
            self._data_frame(stream_id, len(payload), bool(flags & f.END_STREAM))
            self.data_left = 0
            self._deliver(memoryview(_unpad(payload)), bool(flags & f.END_STREAM))
        elif kind == f.SETTINGS:
            if not flags & f.ACK:
                self.peer_settings(payload)
        elif kind == f.WINDOW_UPDATE:
            self.window_update(stream_id, payload)
        elif kind == f.PING:
            if len(payload) != 8:
                raise f.ProtocolError("PING payload not 8 bytes", f.FRAME_SIZE_ERROR)
            if not flags & f.ACK:
                self.write(f.ping_ack(payload))
        elif kind == f.RST_STREAM:
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.local_closed = stream.remote_closed = True
                self.forget(stream)
                if stream.handler is not None:
                    stream.handler.on_reset()
        elif kind == f.GOAWAY:
            self.going_away = True
        elif kind == f.PUSH_PROMISE:
            raise f.ProtocolError("PUSH_PROMISE from a client")
        # PRIORITY and unknown frame types are ignored (RFC 9113 section 5.5).

    def _headers_frame(self, stream_id: int, flags: int, payload: bytes) -> None:
        if not stream_id:
            raise f.ProtocolError("HEADERS on stream 0")
        if len(payload) > MAX_HEADER_BLOCK:
            raise f.ProtocolError("header block too large", f.ENHANCE_YOUR_CALM)
        end = bool(flags & f.END_STREAM)
        if flags & f.END_HEADERS:
            self._header_block(stream_id, payload, end)
        else:
            self.block_stream = stream_id
            self.block = [payload]
            self.block_size = len(payload)
            self.block_end = end

    def _header_block(self, stream_id: int, block: bytes, end: bool) -> None:
        self.block_stream = 0
        self.block = []
        fields = self.decoder.decode(block)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: only the end of its stream matters
            if end:
                self.data_stream = stream_id
                self._deliver(memoryview(b""), True)
            return
        if stream_id <= self.last_stream or not stream_id & 1:
            if stream_id > self.last_stream:
                raise f.ProtocolError("even stream id from a client")
            return  # a stream already closed (reset by us): ignore
        self.last_stream = stream_id
        if self.going_away or len(self.streams) >= MAX_STREAMS:
            self.write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        stream = Stream(self, stream_id, self.peer_initial_window)
        stream.remote_closed = end
        self.streams[stream_id] = stream
        stream.handler = self.app.open(stream, fields)
        if stream.handler is not None and end:
            stream.handler.on_data(memoryview(b""), True)
        if stream.local_closed and stream.remote_closed:
            self.forget(stream)

    # -- shutdown ----------------------------------------------------------------------------

    def go_away(self) -> None:
        """No new streams (RFC 9113 section 6.8); the open ones finish."""
        if not self.going_away:
            self.going_away = True
            self.write(f.goaway(self.last_stream, f.NO_ERROR))

    def close(self) -> None:
        self._flush()
        if self.transport is not None:
            self.transport.close()


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise f.ProtocolError("padded frame without a pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise f.ProtocolError("padding longer than the frame")
    return payload[1 : len(payload) - pad]
