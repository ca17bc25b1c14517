"""The socket workers connect to, and the connection the daemon keeps to each worker.

A worker proves who it is with the instance id and the one-time token the daemon put in its
environment; the peer's uid (SO_PEERCRED) must be ours or root. Anything else is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
import struct
from typing import Any

from pbd.errors import unavailable
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import FrameError, encode_frame, read_frame, socket_address

log = logging.getLogger("pbd.instances")
HELLO_TIMEOUT_S = 10.0


class WorkerConnection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: wpb.Hello
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.pid = hello.pid
        self.hello = hello
        self._outbox: list[bytes] = []

    async def recv(self) -> wpb.WorkerToDaemon | None:
        """The next message, or None when the worker is gone (EOF, reset or garbage)."""
        try:
            frame = await read_frame(self.reader)
        except (FrameError, ConnectionError, OSError):
            return None
        if frame is None:
            return None
        try:
            return wpb.WorkerToDaemon.FromString(frame)
        except Exception:  # noqa: BLE001 - undecodable frame: treat the worker as broken
            return None

    def send(self, message: wpb.DaemonToWorker) -> None:
        """Queue a frame; frames sent in one event-loop iteration go out in one write."""
        if self.writer.is_closing():
            raise unavailable("worker connection is closed")
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(encode_frame(message.SerializeToString()))

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        if frames and not self.writer.is_closing():
            self.writer.write(b"".join(frames))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class WorkerHub:
    def __init__(self, address: str) -> None:
        self.address = address
        self._server: asyncio.AbstractServer | None = None
        self._pending: dict[str, tuple[str, asyncio.Future[WorkerConnection]]] = {}
        # Where instances hand the BLS messages of their workers (a pbd.bls.service.BlsService).
        self.bls: Any = None

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if not self.address.startswith("@"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)
        sock.bind(socket_address(self.address))
        if not self.address.startswith("@"):
            os.chmod(self.address, 0o600)
        self._server = await asyncio.start_unix_server(self._on_connect, sock=sock, limit=1 << 20)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if not self.address.startswith("@"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(unavailable("daemon is shutting down"))
        self._pending.clear()

    def expect(self, instance_id: str, token: str) -> asyncio.Future[WorkerConnection]:
        """A future that gets the connection of the worker that presents ``token``."""
        future: asyncio.Future[WorkerConnection] = asyncio.get_running_loop().create_future()
        self._pending[instance_id] = (token, future)
        return future

    def forget(self, instance_id: str) -> None:
        self._pending.pop(instance_id, None)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not _peer_allowed(writer):
                raise PermissionError("peer uid is neither ours nor root")
            frame = await asyncio.wait_for(read_frame(reader), HELLO_TIMEOUT_S)
            hello = wpb.WorkerToDaemon.FromString(frame or b"")
            if hello.WhichOneof("kind") != "hello":
                raise ValueError("first message is not Hello")
            pending = self._pending.get(hello.hello.instance)
            if pending is None:
                # A worker that outlived its daemon may call before we expect it: it retries.
                log.debug("worker %r connected before it was expected", hello.hello.instance)
                writer.close()
                return
            if not hmac.compare_digest(pending[0], hello.hello.token):
                raise ValueError(f"bad token for {hello.hello.instance!r}")
            token, future = self._pending.pop(hello.hello.instance)
            if future.done():
                raise ValueError("instance no longer waits for a worker")
            future.set_result(WorkerConnection(reader, writer, hello.hello))
        except Exception as exc:  # noqa: BLE001 - a stranger on the socket must not hurt us
            log.warning("refused a worker connection: %s", exc or type(exc).__name__)
            writer.close()


def _peer_allowed(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (0, os.getuid())
