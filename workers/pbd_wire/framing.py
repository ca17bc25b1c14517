"""Length-prefixed frames over a stream socket.

A frame is a 4-byte little-endian payload length followed by the payload, a serialized
``DaemonToWorker`` or ``WorkerToDaemon`` message. The functions here are pure or take a
socket/stream; they know nothing about the messages inside.
"""

from __future__ import annotations

import asyncio
import socket
import struct

HEADER = struct.Struct("<I")
# Frames carry descriptors, never tensor bytes: anything near this is a bug or an attack.
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(Exception):
    """The peer sent something that is not a valid frame."""


def encode_frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(payload)) + payload


def decode_length(header: bytes | bytearray | memoryview) -> int:
    length: int = HEADER.unpack(header)[0]
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return length


class FrameSplitter:
    """What an ``asyncio.Protocol`` has read of a stream so far, cut into whole frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def split(self, data: bytes | memoryview) -> list[bytes | bytearray | memoryview]:
        """Add ``data``; the payloads of the frames now whole, in order (a partial one stays
        for the next read, copied). A frame may be a slice of ``data`` itself. FrameError on a
        length no frame may have."""
        buffer = self._buffer
        size = HEADER.size
        if not buffer and len(data) >= size:
            # Nearly always: nothing left over, and the read brought exactly one frame.
            length = decode_length(data[:size])
            if len(data) == size + length:
                return [data[size:]]
        buffer += data
        frames: list[bytes | bytearray | memoryview] = []
        pos, end = 0, len(buffer)
        try:
            while end - pos >= size:
                length = decode_length(buffer[pos : pos + size])
                if end - pos - size < length:
                    break
                start = pos + size
                pos = start + length
                frames.append(buffer[start:pos])
        finally:
            if pos:
                del buffer[:pos]
        return frames


class SocketFrameReader:
    """Blocking frame reader for the worker's socket. ``read()`` returns None at EOF."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def _fill(self, n: int) -> bool:
        while len(self._buffer) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                return False
            self._buffer += chunk
        return True

    def buffered(self) -> bool:
        """Bytes already read from the socket wait here (a next frame, or part of one)."""
        return bool(self._buffer)

    def read(self) -> bytes | None:
        if not self._buffer:
            # Nearly always: nothing left over, and one recv brings exactly one frame.
            chunk = self._sock.recv(65536)
            if not chunk:
                return None
            if len(chunk) >= HEADER.size:
                length = decode_length(chunk[: HEADER.size])
                if len(chunk) == HEADER.size + length:
                    return chunk[HEADER.size :]
            self._buffer += chunk
        if not self._fill(HEADER.size):
            if self._buffer:
                raise FrameError("connection closed inside a frame header")
            return None
        length = decode_length(bytes(self._buffer[: HEADER.size]))
        if not self._fill(HEADER.size + length):
            raise FrameError("connection closed inside a frame")
        payload = bytes(self._buffer[HEADER.size : HEADER.size + length])
        del self._buffer[: HEADER.size + length]
        return payload


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """Read one frame from an asyncio stream; None at a clean EOF."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("connection closed inside a frame header") from exc
        return None
    length = decode_length(header)
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise FrameError("connection closed inside a frame") from exc


def socket_address(address: str) -> str | bytes:
    """``@name`` is a Linux abstract socket (no file to clean up); anything else a path."""
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address
