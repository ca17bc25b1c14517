"""The public listening sockets (gRPC on TCP or a Unix socket, HTTP on TCP).

Bound once, by the daemon, whichever process then serves them: the daemon itself, or every
front-end process (``pbd serve --frontends N``), each accepting connections from the same
socket (the kernel hands each new connection to one of them).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from pbd.settings import Settings

BACKLOG = 1024


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
