"""One HTTP/2 server connection on an asyncio transport: the I/O around ``pbd.h2.core.Core``.

The connection is an ``asyncio.BufferedProtocol``. The transport reads into a buffer that all
the server's connections share (:class:`Shared`: a read is handled to its end before the next
one starts, and the core copies what it keeps), so an idle connection holds no read buffer;
while a large message's DATA is coming, the transport reads straight into the message's own
buffer instead (``Core.room``): a 16 MiB request is copied once, by the kernel. What the core
writes while it handles a read leaves in one ``write`` at its end; what it writes later (an
answer) leaves at once.

Several buffers written together (a large answer: a header and a view of the message for each
DATA frame, 128 of them for 1 MiB at the default 16 KiB frames) leave in one ``writev`` on the
socket, for as much as it takes, when the transport holds nothing unsent (else they would
overtake it) and carries no TLS; what is left goes to the transport, which sends it when the
socket drains. Before, each buffer was a ``write``: one ``sendto`` each, 134 of them per 1 MiB
answer, a quarter of the daemon's CPU for it.

Timers (``pbd.h2.limits.Limits``): a new connection has ``handshake_timeout`` for its preface
and first SETTINGS, a header block ``header_timeout`` for its CONTINUATION frames, and so has a
frame the core keeps part way in (all end the connection with GOAWAY ENHANCE_YOUR_CALM: a
slow client holds at most one frame, 64 KiB, no longer than that); a connection without an
open stream is
closed with GOAWAY NO_ERROR once it has been idle ``idle_timeout`` (checked every
``idle_timeout``, so after one to two of them). None of them costs anything per read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable

from pbd.corks import begin, end
from pbd.h2 import frames as f
from pbd.h2.core import DIRECT_MIN, Application, Core
from pbd.h2.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger("pbd.h2")

# What one read takes at most. A read is handled in one go, so this bounds how long one
# connection keeps the event loop (64 KiB of the smallest frames parse in a few ms); a large
# message's DATA goes straight into its own buffer, whatever this is.
READ_SIZE = 64 * 1024
# The most buffers one writev takes (Linux: 1024).
IOV_MAX = os.sysconf("SC_IOV_MAX")
# After a connection error, how long input is read and dropped before the socket is closed.
CLOSE_LINGER_S = 1.0


class Shared:
    """What one server's connections share: their limits and the read buffer."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.read_buffer = memoryview(bytearray(READ_SIZE))


class Connection(asyncio.BufferedProtocol):
    __slots__ = (
        "app", "on_lost", "shared", "core", "transport", "loop", "timer", "block_timer",
        "seen", "fd",
    )  # fmt: skip

    def __init__(
        self, app: Application, on_lost: Callable[[Connection], None], shared: Shared
    ) -> None:
        self.app = app
        self.on_lost = on_lost
        self.shared = shared
        self.core: Core | None = None
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None  # the handshake, then the idle check
        self.block_timer: asyncio.TimerHandle | None = None
        self.seen = -1  # the last stream id at the previous idle check
        self.fd = -1  # the socket, where buffers may be written to it directly (no TLS)

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Kept: asyncio.get_running_loop() makes a getpid() system call each time on 3.11.
        loop = self.loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A vanished client's connection (and any call it left open) is found by the
            # kernel's keepalive probes (2 h idle by default, as grpc core's server pings).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if sock is not None and transport.get_extra_info("sslcontext") is None:
            self.fd = sock.fileno()
        limits = self.shared.limits
        core = self.core = Core(self.app, limits, loop.time)
        transport.write(core.data_to_send())
        core.sink = self._send
        core.sink_parts = self._send_parts
        if limits.handshake_timeout:
            self.timer = loop.call_later(limits.handshake_timeout, self._handshake_expired)

    def pause_writing(self) -> None:
        # The client does not read what we write (answers, PING and SETTINGS acks): stop
        # reading what makes more, so the buffer stays near its high-water mark.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        core = self.core
        if self.transport is not None and (core is None or not core.failed):
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._cancel_timers()
        if self.core is not None:
            self.core.lost()
        self.on_lost(self)

    # -- reading: into the shared buffer, or straight into a message's -----------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        core = self.core
        assert core is not None
        if core.data_left >= DIRECT_MIN:
            room = core.room()
            if room is not None:
                return room
        return self.shared.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        core = self.core
        assert core is not None
        # What the read's requests write elsewhere (an Execute each to a worker) leaves at
        # its end, one write per link (``pbd.corks``).
        block = begin()
        try:
            if core.direct is not None:
                core.wrote(nbytes)
            else:
                core.receive(self.shared.read_buffer[:nbytes])
        finally:
            end(block)
        if core.out and self.transport is not None:
            out = core.take_out()
            if len(out) == 1:
                self.transport.write(out[0])
            else:
                self._send_parts(out)
        if core.error is not None:
            self._fail()
        elif core.block_stream or core.partial:  # a header block or a frame part way in
            if self.block_timer is None and core.limits.header_timeout:
                self.block_timer = self.loop.call_later(
                    core.limits.header_timeout, self._block_expired
                )
        elif self.block_timer is not None:
            self.block_timer.cancel()
            self.block_timer = None
        if self.seen < 0 and core.handshaken:
            self._handshake_done()

    def _send(self, data: bytes | memoryview) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _send_parts(self, parts: list[bytes | memoryview]) -> None:
        transport = self.transport
        if transport is None:
            return
        if self.fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
            parts = write_vector(self.fd, parts)
            if not parts:
                return
        transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    # -- timers ------------------------------------------------------------------------------

    def _handshake_done(self) -> None:
        self.seen = 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.shared.limits.idle_timeout:
            self.timer = self.loop.call_later(self.shared.limits.idle_timeout, self._idle_check)

    def _handshake_expired(self) -> None:
        self.timer = None
        self._end(f.ENHANCE_YOUR_CALM, "no HTTP/2 preface and SETTINGS in time")

    def _block_expired(self) -> None:
        self.block_timer = None
        self._end(f.ENHANCE_YOUR_CALM, "a header block or a frame was not completed in time")

    def _idle_check(self) -> None:
        """Idle: no stream open now, and none opened since the last check."""
        self.timer = None
        core = self.core
        if core is None or self.transport is None or core.error is not None:
            return
        if not core.streams and core.last_stream == self.seen:
            core.go_away(f.NO_ERROR, "idle")
            self._fail()
            return
        self.seen = core.last_stream
        self.timer = self.loop.call_later(self.shared.limits.idle_timeout, self._idle_check)

    def _cancel_timers(self) -> None:
        for timer in (self.timer, self.block_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.block_timer = None

    # -- ending --------------------------------------------------------------------------------

    def _end(self, code: int, reason: str) -> None:
        core = self.core
        if core is None or self.transport is None or core.error is not None:
            return
        log.debug("HTTP/2 connection ended: %s", reason)
        core.close(code, reason)
        self.transport.write(core.data_to_send())
        self._fail()

    def _fail(self) -> None:
        """Close after a connection error or an idle GOAWAY so that the GOAWAY arrives:
        closing a socket with unread input resets it, and a client that has not read the
        GOAWAY by then may lose it. So the write side is shut first and the socket closed a
        moment later, where the transport can (TLS cannot). Meanwhile nothing is read: a
        flood cut off this way cannot keep the server reading (and dropping) what it sends."""
        self._cancel_timers()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.core is not None and self.core.error is not None:
            log.debug("HTTP/2 connection error: %s", self.core.error)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.pause_reading()
        transport.write_eof()
        self.loop.call_later(CLOSE_LINGER_S, transport.close)

    @property
    def open_streams(self) -> int:
        """Streams not closed yet: an answer whose handler returned stays open until its last
        DATA and trailers are sent, which the peer's flow-control window may hold back."""
        return len(self.core.streams) if self.core is not None else 0

    def go_away(self) -> None:
        """No new streams (RFC 9113 section 6.8); the open ones finish."""
        if self.core is not None:
            self.core.go_away()

    def close(self) -> None:
        if self.transport is not None:
            if self.core is not None and self.core.out:
                self.transport.write(self.core.data_to_send())
            self.transport.close()


class Refused(asyncio.Protocol):
    """A connection past the server's limit: the server's SETTINGS and a GOAWAY
    ENHANCE_YOUR_CALM saying why; what the client sends is dropped until it closes, or for
    a second, so that the GOAWAY arrives before the socket closes."""

    __slots__ = ("reason", "transport")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(
            f.settings({}) + f.goaway(0, f.ENHANCE_YOUR_CALM, self.reason.encode()[:200])
        )
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        asyncio.get_running_loop().call_later(CLOSE_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client is done: close now


def write_vector(fd: int, parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """Write ``parts`` in order to the non-blocking socket ``fd`` (``writev``, ``IOV_MAX`` at
    a time) as far as it takes them now; what it did not take (all of it on an error, which
    the transport then meets and reports)."""
    start = 0
    while start < len(parts):
        chunk = parts[start : start + IOV_MAX]
        try:
            sent = os.writev(fd, chunk)
        except OSError:  # BlockingIOError: the socket is full
            return parts[start:]
        for i, part in enumerate(chunk):
            size = len(part)
            if sent < size:
                rest = parts[start + i :]
                rest[0] = memoryview(part)[sent:]
                return rest
            sent -= size
        start += len(chunk)
    return []
