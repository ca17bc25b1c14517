"""The worker's end of its connection to the daemon.

One Unix stream socket, length-prefixed frames. Sends come from the main thread, the heartbeat
thread and model threads, so they hold a lock and go out as one write each, preceded by the
custom-metric updates buffered since the last one. A metric query (``ask``) waits for its
reply: it reads frames itself when no one else is reading, keeping the others (a pipelined
Execute, a Release) for the main loop, which reads with ``next``.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
from collections.abc import Callable

from pbd_worker._proto import worker_pb2 as wpb
from pbd_worker.ipc.framing import SocketFrameReader, encode_frame, socket_address


class DaemonLink:
    def __init__(
        self, address: str, pending_updates: Callable[[], wpb.MetricUpdates | None]
    ) -> None:
        self.address = address
        self.pending_updates = pending_updates
        self.sock: socket.socket | None = None
        self.reader: SocketFrameReader | None = None
        self._send_lock = threading.Lock()
        # Frames read while waiting for a metric reply, and replies read by someone else.
        self._backlog: collections.deque[wpb.DaemonToWorker] = collections.deque()
        self._read_lock = threading.Lock()
        self._replies: dict[int, wpb.MetricReply] = {}
        self._replied = threading.Condition()

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

    def send(self, *messages: wpb.WorkerToDaemon) -> None:
        """Send ``messages`` (nothing: only the buffered metric updates) in one write."""
        with self._send_lock:
            if self.sock is None:
                raise BrokenPipeError("not connected to the daemon")
            frames = [encode_frame(m.SerializeToString()) for m in messages]
            updates = self.pending_updates()
            if updates is not None:
                frames.insert(
                    0, encode_frame(wpb.WorkerToDaemon(metrics=updates).SerializeToString())
                )
            if frames:
                self.sock.sendall(b"".join(frames))

    # -- reading -------------------------------------------------------------------------------

    def _read_one(self) -> wpb.DaemonToWorker | None:
        """One frame (caller holds the read lock); a metric reply is filed, not returned."""
        reader = self.reader
        frame = reader.read() if reader is not None else None
        if frame is None:
            return None
        message = wpb.DaemonToWorker.FromString(frame)
        if message.WhichOneof("kind") == "metric_reply":
            with self._replied:
                self._replies[message.metric_reply.query] = message.metric_reply
                self._replied.notify_all()
        return message

    def next(self) -> wpb.DaemonToWorker | None:
        while True:
            with self._read_lock:
                message = self._backlog.popleft() if self._backlog else self._read_one()
            if message is None or message.WhichOneof("kind") != "metric_reply":
                return message

    def ask(self, updates: wpb.MetricUpdates) -> wpb.MetricReply:
        """Send a metric query and wait for its reply. On the thread running the model the
        main loop is not reading, so read here; another thread may find the main loop
        reading, and then waits for it to file the reply."""
        query = updates.query
        self.send(wpb.WorkerToDaemon(metrics=updates))
        while True:
            with self._replied:
                reply = self._replies.pop(query, None)
            if reply is not None:
                return reply
            if self._read_lock.acquire(blocking=False):
                try:
                    # The reader we waited for may have filed our reply just before it let go
                    # of the lock: reading now would wait for a frame that never comes.
                    with self._replied:
                        reply = self._replies.pop(query, None)
                    message = self._read_one() if reply is None else None
                finally:
                    self._read_lock.release()
                if reply is not None:
                    return reply
                if message is None:
                    raise RuntimeError("the daemon closed the connection")
                if message.WhichOneof("kind") != "metric_reply":
                    self._backlog.append(message)
            else:
                with self._replied:
                    self._replied.wait_for(lambda: query in self._replies, timeout=0.05)

    def forget_backlog(self) -> None:
        """The daemon is gone: frames it sent earlier are void."""
        self._backlog.clear()
