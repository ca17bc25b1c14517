"""Who is on the other end of a local socket: the daemon's private sockets (the one workers
connect to, the one front ends connect to) take only processes of its own user, or root."""

from __future__ import annotations

import asyncio
import os
import socket
import struct


def peer_allowed(transport: asyncio.BaseTransport) -> bool:
    """The peer's uid (SO_PEERCRED) is ours or root."""
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (0, os.getuid())
