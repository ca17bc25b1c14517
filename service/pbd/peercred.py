"""Who is on the other end of a local socket: the daemon's private sockets (the one workers
connect to, the one front ends connect to) take only processes of its own user, or root."""

from __future__ import annotations

import asyncio
import os
import socket
import struct


def peer_credentials(transport: asyncio.BaseTransport) -> tuple[int, int] | None:
    """(pid, uid) of the process that connected (SO_PEERCRED); None without a socket."""
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def peer_allowed(transport: asyncio.BaseTransport) -> bool:
    """The peer's uid (SO_PEERCRED) is ours or root."""
    creds = peer_credentials(transport)
    return creds is not None and creds[1] in (0, os.getuid())
