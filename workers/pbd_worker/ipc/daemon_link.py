"""The worker's end of its connection to the daemon.

One Unix stream socket, length-prefixed frames. Sends come from the main thread, the heartbeat
thread and model threads, so they hold a lock and go out as one write each, preceded by the
custom-metric updates buffered since the last one, the frames of ``pending_frames`` and those
deferred until then (spans). A metric query (``ask``) or a BLS call (``wait_reply``) waits for
its reply: it reads frames itself when no one else is reading, keeping the others (a pipelined
Execute, a Release) for the main loop, which reads with ``next``. While coroutines of the
model are alive, the main thread reads through ``pbd_worker.event_loop`` instead: only frames
that are already here (``read_ready``), and ``woke`` tells it when another reader took some.
A worker that listens for front ends waits with ``next_or``: on the daemon's socket and the
front links' at once.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading
from collections.abc import Callable
from typing import Literal

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame, socket_address


class DaemonLink:
    def __init__(
        self, address: str, pending_updates: Callable[[], wpb.MetricUpdates | None]
    ) -> None:
        self.address = address
        self.pending_updates = pending_updates
        self.sock: socket.socket | None = None
        self.reader: SocketFrameReader | None = None
        self._send_lock = threading.Lock()
        self._deferred: list[bytes] = []  # frames that ride along with the next send
        # More producers of frames that ride ahead of the next send (each returns a list).
        self.pending_frames: list[Callable[[], list[wpb.WorkerToDaemon]]] = []
        # Frames read while waiting for a metric reply, and replies read by someone else.
        self._backlog: collections.deque[wpb.DaemonToWorker] = collections.deque()
        self._read_lock = threading.Lock()
        self._replies: dict[tuple[str, int], collections.deque[wpb.DaemonToWorker]] = {}
        self._replied = threading.Condition()
        # Called after a thread in ``wait_reply`` read frames (the event loop re-checks).
        self.woke: Callable[[], None] | None = None

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(socket_address(self.address))
        except OSError:
            sock.close()
            raise
        with self._send_lock:
            self.sock, self.reader = sock, SocketFrameReader(sock)

    def disconnect(self) -> None:
        with self._send_lock:
            sock, self.sock, self.reader = self.sock, None, None
        if sock is not None:
            # shutdown() first: it wakes the reader thread out of recv(); close() alone would
            # leave it there (and the connection open) for as long as the peer is silent.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def forget_after_fork(self) -> None:
        """In a process the model forked: the connection is the worker's, not ours. Close
        our copy of its descriptor (no shutdown: that would cut the worker's connection too)
        and start over with fresh locks (the copies may be held by threads that are not
        here); sending then fails at once instead of mixing our frames with the worker's."""
        sock, self.sock, self.reader = self.sock, None, None
        if sock is not None:
            sock.close()
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._replied = threading.Condition()
        self._deferred.clear()
        self._backlog.clear()
        self._replies.clear()
        self.woke = None

    def send(self, *messages: wpb.WorkerToDaemon) -> None:
        """Send ``messages`` (nothing: only the buffered metric updates) in one write."""
        with self._send_lock:
            if self.sock is None:
                raise BrokenPipeError("not connected to the daemon")
            frames = [encode_frame(m.SerializeToString()) for m in messages]
            for extra in self.pending_frames:  # e.g. BLS releases, ahead of everything
                produced = extra()
                if produced:
                    frames[:0] = [encode_frame(m.SerializeToString()) for m in produced]
            updates = self.pending_updates()
            if updates is not None:
                frames.insert(
                    0, encode_frame(wpb.WorkerToDaemon(metrics=updates).SerializeToString())
                )
            if self._deferred:
                frames[:0], self._deferred = self._deferred, []
            if frames:
                self.sock.sendall(b"".join(frames))

    def defer(self, message: wpb.WorkerToDaemon) -> None:
        """Send ``message`` ahead of the next frame anyone sends (a result, a heartbeat): no
        write, and no wake-up of the daemon, of its own."""
        frame = encode_frame(message.SerializeToString())
        with self._send_lock:
            self._deferred.append(frame)

    # -- reading -------------------------------------------------------------------------------

    def _read_one(self) -> wpb.DaemonToWorker | None:
        """One frame (caller holds the read lock); a reply someone waits for is filed, not
        returned."""
        return self._read_keyed()[0]

    def _read_keyed(self) -> tuple[wpb.DaemonToWorker | None, tuple[str, int] | None]:
        """``_read_one``, and the frame's reply key (None: not a reply)."""
        reader = self.reader
        frame = reader.read() if reader is not None else None
        if frame is None:
            return None, None
        message = wpb.DaemonToWorker.FromString(frame)
        key = _reply_key(message)
        if key is not None:
            with self._replied:
                self._replies.setdefault(key, collections.deque()).append(message)
                self._replied.notify_all()
        return message, key

    def next(self) -> wpb.DaemonToWorker | None:
        while True:
            message: wpb.DaemonToWorker | None
            with self._read_lock:
                if self._backlog:
                    message = self._backlog.popleft()
                    key = _reply_key(message)
                else:
                    message, key = self._read_keyed()
            if message is None or key is None:
                return message

    def next_or(
        self, wait: Callable[[socket.socket], bool]
    ) -> wpb.DaemonToWorker | None | Literal[False]:
        """``next``, waiting with ``wait(sock)`` instead of in ``recv``: it blocks until the
        socket or something else (a front link, ``ipc.front_connections``) is ready, True for the
        socket. False: the other thing is ready, nothing was read. The read lock is held while
        waiting, as ``next`` holds it in ``recv``: replies are filed here, for whoever waits."""
        while True:
            message: wpb.DaemonToWorker | None
            with self._read_lock:
                if self._backlog:
                    return self._backlog.popleft()
                reader, sock = self.reader, self.sock
                if reader is None or sock is None:
                    return None
                if not reader.buffered() and not wait(sock):
                    return False
                message, key = self._read_keyed()
            if message is None or key is None:
                return message

    def ask(self, updates: wpb.MetricUpdates) -> wpb.MetricReply:
        """Send a metric query and wait for its reply."""
        self.send(wpb.WorkerToDaemon(metrics=updates))
        return self.wait_reply(("metric_reply", updates.query)).metric_reply

    def wait_reply(self, key: tuple[str, int]) -> wpb.DaemonToWorker:
        """The next reply filed under ``key`` (a metric query, a BLS call). On the thread
        running the model the main loop is not reading, so read here; another thread may find
        the main loop (or another waiter) reading, and then waits for it to file the reply."""
        while True:
            reply = self.take_reply(key)
            if reply is not None:
                return reply
            if self._read_lock.acquire(blocking=False):
                try:
                    # The reader we waited for may have filed our reply just before it let go
                    # of the lock: reading now would wait for a frame that never comes.
                    reply = self.take_reply(key)
                    message = self._read_one() if reply is None else None
                    # Kept before the lock goes: the next reader looks here first.
                    if message is not None and _reply_key(message) is None:
                        self._backlog.append(message)
                finally:
                    self._read_lock.release()
                if reply is not None:
                    return reply
                if message is None:
                    raise RuntimeError("the daemon closed the connection")
                if self.woke is not None:
                    self.woke()
            else:
                with self._replied:
                    self._replied.wait_for(lambda: key in self._replies, timeout=0.05)

    def read_ready(self) -> wpb.DaemonToWorker | None:
        """The next frame for the main loop if it is here already (kept, buffered, or waiting
        on the socket), filing the replies read on the way; None when there is none (or
        another thread is reading). EOFError when the daemon closed the connection."""
        if not self._read_lock.acquire(blocking=False):
            return None
        try:
            while not self._backlog:
                reader, sock = self.reader, self.sock
                if reader is None or sock is None:
                    raise EOFError("not connected to the daemon")
                if not reader.buffered() and not select.select([sock], [], [], 0)[0]:
                    return None
                message = self._read_one()
                if message is None:
                    raise EOFError("the daemon closed the connection")
                if _reply_key(message) is None:
                    return message
            return self._backlog.popleft()
        finally:
            self._read_lock.release()

    def take_reply(self, key: tuple[str, int]) -> wpb.DaemonToWorker | None:
        with self._replied:
            queue = self._replies.get(key)
            if not queue:
                return None
            reply = queue.popleft()
            if not queue:
                del self._replies[key]
            return reply

    def forget_backlog(self) -> None:
        """The daemon is gone: frames it sent earlier are void."""
        self._backlog.clear()


def _reply_key(message: wpb.DaemonToWorker) -> tuple[str, int] | None:
    kind = message.WhichOneof("kind")
    if kind == "metric_reply":
        return kind, message.metric_reply.query
    if kind == "bls_reply":
        return kind, message.bls_reply.call_id
    if kind == "pool_grant":
        return kind, message.pool_grant.query
    return None
