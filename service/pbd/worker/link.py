"""The daemon's end of one worker's socket: frames in and out, without a task per message.

An ``asyncio.Protocol``: the event loop hands ``data_received`` whatever the socket had, the
frames in it are decoded there and passed, in order and synchronously, to the link's
``handler`` (the running instance's ``on_message``). Before a handler is attached (the Hello
and the start-up conversation) frames wait in a queue that ``recv()`` reads. A result thus
reaches the request waiting for it in the same loop iteration that read it: no reader task,
no ``readexactly`` per frame. ``None`` tells the handler (or ``recv()``) that the worker is
gone: EOF, a reset, or a frame that does not decode.

A frame is written when it is sent (``send``): the worker starts on it while the daemon goes
on; batching a loop turn's frames into one write saved syscalls but cost every request that
turn's latency.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

from pbd.errors import unavailable
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import FrameError, FrameSplitter, encode_frame

log = logging.getLogger("pbd.instances")
Handler = Callable[[wpb.WorkerToDaemon | None], None]


class WorkerLink(asyncio.Protocol):
    def __init__(self, on_connected: Callable[[WorkerLink], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.hello: wpb.Hello | None = None
        self.pid = 0
        self._on_connected = on_connected
        self._frames = FrameSplitter()
        self._handler: Handler | None = None
        self._queue: collections.deque[wpb.WorkerToDaemon | None] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self._on_connected is not None:
            self._on_connected(self)

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._frames.split(data):
                # FromString parses any buffer; its stub says bytes.
                self._deliver(wpb.WorkerToDaemon.FromString(frame))  # type: ignore[arg-type]
                if self._ended:
                    return
        except (FrameError, ValueError) as exc:  # ValueError: protobuf's DecodeError
            log.warning("worker %s sent an undecodable frame (%s); dropping it", self.pid, exc)
            self.close()
            self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    # -- receiving ------------------------------------------------------------------------------

    def _deliver(self, message: wpb.WorkerToDaemon | None) -> None:
        if self._handler is not None:
            try:
                self._handler(message)
            except Exception:  # a bug in one handler must not end the connection
                log.exception("handling a message of worker %s failed", self.pid)
            return
        self._queue.append(message)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._deliver(None)

    async def recv(self) -> wpb.WorkerToDaemon | None:
        """The next message before a handler is attached; None once the worker is gone."""
        while not self._queue:
            if self._ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._queue.popleft()

    def attach(self, handler: Handler) -> None:
        """From now on every message (and the final None) goes to ``handler`` as it is read,
        starting with any that ``recv()`` has not taken."""
        self._handler = handler
        while self._queue:
            self._deliver(self._queue.popleft())

    def detach(self) -> None:
        """Messages wait for ``recv()`` again."""
        self._handler = None

    # -- sending --------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def send(self, message: wpb.DaemonToWorker) -> None:
        """Write a frame now: the worker starts on it while the daemon goes on (batching the
        frames of one loop turn into one write cost that turn's latency on every request)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise unavailable("worker connection is closed")
        transport.write(encode_frame(message.SerializeToString()))

    def tell(self, message: wpb.DaemonToWorker) -> None:
        """``send``, except that news for a worker whose link is closing is dropped."""
        if not self.closing:
            self.send(message)

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()
