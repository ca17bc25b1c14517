"""The socket workers connect to.

A worker proves who it is with the instance id and the one-time token the daemon put in its
environment; the peer's uid (SO_PEERCRED) must be ours or root. Anything else is dropped.
A launcher may vouch for a process instead (``vouch``: a systemd unit's main process whose
token was lost with its EnvironmentFile): that process, as SO_PEERCRED names it, is taken
whatever token it presents.
Each accepted connection is a :class:`~pbd.worker.link.WorkerLink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
from typing import Any

from pbd.errors import unavailable
from pbd.peercred import peer_allowed, peer_credentials
from pbd.worker.link import WorkerLink
from pbd_wire.framing import socket_address

log = logging.getLogger("pbd.instances")
HELLO_TIMEOUT_S = 10.0
# A refused worker calls again (backing off, about once a second at most): its first refusal
# is a WARNING, then one line per this many, so a worker the daemon cannot take (a stale
# token) is visible without flooding the journal.
REFUSALS_PER_LINE = 100


class WorkerHub:
    def __init__(self, address: str) -> None:
        self.address = address
        self._server: asyncio.AbstractServer | None = None
        self._pending: dict[str, tuple[str, asyncio.Future[WorkerLink]]] = {}
        self._vouched: dict[str, int] = {}  # instance id -> the pid its launcher vouches for
        self._refusals: dict[str, int] = {}  # refusals so far, by what was wrong

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if not self.address.startswith("@"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)
        sock.bind(socket_address(self.address))
        if not self.address.startswith("@"):
            os.chmod(self.address, 0o600)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: WorkerLink(self._on_connect), sock=sock
        )

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

    def expect(self, instance_id: str, token: str) -> asyncio.Future[WorkerLink]:
        """A future that gets the connection of the worker that presents ``token``."""
        future: asyncio.Future[WorkerLink] = asyncio.get_running_loop().create_future()
        self._pending[instance_id] = (token, future)
        self._vouched.pop(instance_id, None)
        return future

    def vouch(self, instance_id: str, pid: int) -> None:
        """The worker ``expect`` waits for is process ``pid``, whatever token it presents."""
        self._vouched[instance_id] = pid

    def forget(self, instance_id: str) -> None:
        self._pending.pop(instance_id, None)
        self._vouched.pop(instance_id, None)

    def _on_connect(self, link: WorkerLink) -> None:
        """A worker connected: its first message must be a Hello with the right token."""
        assert link.transport is not None
        if not peer_allowed(link.transport):
            log.warning("refused a worker connection: peer uid is neither ours nor root")
            link.close()
            return
        timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, link.close)
        link.attach(lambda message: self._on_hello(link, message, timer))

    def _on_hello(self, link: WorkerLink, message: Any, timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        link.detach()  # later frames wait for the instance (``recv``, then its handler)
        try:
            if message is None or message.WhichOneof("kind") != "hello":
                raise ValueError("first message is not Hello")
            hello = message.hello
            pending = self._pending.get(hello.instance)
            if pending is None:
                # A worker that outlived its daemon may call before we expect it: it retries.
                log.debug("worker %r connected before it was expected", hello.instance)
                link.close()
                return
            if not hmac.compare_digest(pending[0], hello.token) and not self._vouched_for(
                link, hello.instance
            ):
                raise ValueError(f"bad token for {hello.instance!r}")
            _token, future = self._pending.pop(hello.instance)
            self._vouched.pop(hello.instance, None)
            if future.done():
                raise ValueError("instance no longer waits for a worker")
            link.hello, link.pid = hello, hello.pid
            future.set_result(link)
        except Exception as exc:  # noqa: BLE001 - a stranger on the socket must not hurt us
            self._refused(str(exc) or type(exc).__name__)
            link.close()

    def _vouched_for(self, link: WorkerLink, instance_id: str) -> bool:
        assert link.transport is not None
        vouched = self._vouched.get(instance_id, 0)
        creds = peer_credentials(link.transport)
        return vouched != 0 and creds is not None and creds[0] == vouched

    def _refused(self, why: str) -> None:
        if len(self._refusals) > 1024:  # strangers naming ever new instances: start over
            self._refusals.clear()
        count = self._refusals[why] = self._refusals.get(why, 0) + 1
        if count == 1:
            log.warning("refused a worker connection: %s", why)
        elif count % REFUSALS_PER_LINE == 0:
            log.warning("refused %d worker connections so far: %s", count, why)
        else:
            log.debug("refused a worker connection (%d times): %s", count, why)
