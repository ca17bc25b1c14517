"""The public listening sockets (gRPC on TCP or a Unix socket, HTTP on TCP), and how a
process shares them with others.

Bound once, by the daemon, whichever process then serves them: the daemon itself, or every
front-end process (``pbd serve --frontends N``), each accepting connections from the same
socket. Every process waiting on the socket is woken by a new connection and the first to
``accept`` gets it; asyncio's own server then accepts every connection waiting, so one front
end took 12 to 15 of 16 connections opened at once (4 front ends, h2load). Front ends accept
with :class:`OneByOne` instead: one connection per wake-up, left for a moment to a front end
that holds fewer connections (``pbd.fronts.loads``), so connections spread evenly.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import stat
from collections.abc import Callable
from dataclasses import dataclass

from pbd.settings import Settings

BACKLOG = 1024
# Out of descriptors (or buffers): accepting waits this long before it tries again.
RETRY_AFTER_S = 1.0
_SOCKET_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

log = logging.getLogger("pbd")


def bind_tcp(host: str, port: int, what: str) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to (one port for all: the first
    one bound picks it when ``port`` is 0). OSError naming ``what`` when one cannot bind."""
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(f"cannot bind {what} to {host}:{port}: {exc.strerror or exc}") from None
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _name, address in infos:
            if (family, address[0]) in seen:
                continue
            seen.add((family, address[0]))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if sockets[0] is not sock and port == 0:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    f"cannot bind {what} to {host}:{port}: {exc.strerror or exc}"
                ) from None
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def bind_unix(path: str, mode: int, what: str) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale socket file there is replaced, as grpc
    core does), with file mode ``mode``."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISDIR(os.stat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind {what} to unix:{path}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def grpc_sockets(settings: Settings) -> list[socket.socket]:
    address = settings.grpc_address
    if address.startswith("unix:"):
        mode = int(settings.grpc_socket_mode, 8)
        return [bind_unix(address.removeprefix("unix:"), mode, "gRPC server")]
    return bind_tcp(address, settings.grpc_port, "gRPC server")


def http_sockets(settings: Settings) -> list[socket.socket]:
    return bind_tcp(settings.http_address, settings.http_port, "HTTP server")


def tcp_port(sockets: list[socket.socket]) -> int:
    """The TCP port ``sockets`` listen on (0 for a Unix socket)."""
    if not sockets or sockets[0].family == socket.AF_UNIX:
        return 0
    return int(sockets[0].getsockname()[1])


@dataclass(frozen=True)
class Sharing:
    """Listening sockets shared with other processes (front ends): accept one connection per
    wake-up, and when ``mine(starting)`` says another process should take it
    (``pbd.fronts.loads``) leave it to the others for ``defer_s``. ``starting``: the
    connections this socket accepted whose protocol is not made yet (a server counts a
    connection from its protocol on, a loop turn after the accept; counted in both places,
    one connection made a front end look loaded by two). ``changed``
    hears of each accept (with ``starting``) and each close (with 0; the gRPC server's) so
    the others see the count at once, and ``others``
    says how many connections the others hold: a connection left to them and still waiting
    after ``defer_s`` is left again if they took any meanwhile (they are moving; this one is
    next), and taken if they took none (the less loaded one is stopped or stuck)."""

    mine: Callable[[int], bool] = lambda _starting: True
    defer_s: float = 0.0
    changed: Callable[[int], None] = lambda _starting: None
    others: Callable[[], int] = lambda: 0


class OneByOne:
    """Serve connections of a shared listening socket as ``sharing`` says:
    ``protocol_factory`` (with ``tls`` when given) as ``loop.create_server`` would, which
    takes as many as are waiting. ``close`` stops accepting (the socket stays open for the
    processes that share it)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        sharing: Sharing,
        tls: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.sock = sock
        self.factory = protocol_factory
        self.sharing = sharing
        self.tls = tls
        self.handshake_timeout = handshake_timeout
        self.loop = asyncio.get_running_loop()
        self._starting: set[asyncio.Task[object]] = set()
        # Connections accepted whose protocol is not made yet: the server does not count them.
        self._unmade = 0
        self._retry: asyncio.TimerHandle | None = None
        # When a wait for the others ended (or began), and their connections when it began.
        self._left: tuple[float, int] | None = None
        self._closed = False
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        sharing = self.sharing
        if not sharing.mine(self._unmade):
            # Another process holds fewer connections: this one is theirs for a moment.
            now, others = self.loop.time(), sharing.others()
            left = self._left
            if left is None or now - left[0] > sharing.defer_s or others != left[1]:
                self._left = (now, others)
                self.loop.remove_reader(self.sock.fileno())
                self._retry = self.loop.call_later(sharing.defer_s, self._resume_left, others)
                return
            # Left to them for defer_s, and they took nothing meanwhile: take it.
        self._left = None
        try:
            conn, _address = self.sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # another process took it, or the client gave up meanwhile
        except OSError as exc:
            if exc.errno not in _SOCKET_LIMITS:
                raise
            log.error("accepting a connection failed (%s); trying again in %gs",
                      exc.strerror, RETRY_AFTER_S)  # fmt: skip
            self.loop.remove_reader(self.sock.fileno())
            self._retry = self.loop.call_later(RETRY_AFTER_S, self._resume)
            return
        conn.setblocking(False)
        task: asyncio.Task[object] = self.loop.create_task(self._start(conn))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        self._unmade += 1
        sharing.changed(self._unmade)

    async def _start(self, conn: socket.socket) -> object:
        made = False

        def protocol() -> asyncio.BaseProtocol:
            # From here the server counts the connection (the gRPC server as it makes the
            # protocol; the HTTP edge a loop turn later, at connection_made).
            nonlocal made
            made = True
            self._unmade -= 1
            return self.factory()

        try:
            return await self.loop.connect_accepted_socket(
                protocol,
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.handshake_timeout if self.tls is not None else None,
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.debug("a connection ended before it was served: %s", exc)
            conn.close()
            return None
        except BaseException:
            conn.close()
            raise
        finally:
            if not made:
                self._unmade -= 1

    def _resume(self) -> None:
        self._retry = None
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def _resume_left(self, others: int) -> None:
        """After leaving a connection to the others for ``defer_s``: if it still waits, the
        reader runs within a loop turn of this, however late this timer ran on a busy loop."""
        self._left = (self.loop.time(), others)
        self._resume()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self.loop.remove_reader(self.sock.fileno())
        for task in list(self._starting):
            task.cancel()
