"""HTTP/2 frame layout (RFC 9113 section 4 and 6): types, flags, settings, error codes, and the
encoders for every frame the server sends. Header blocks the server sends are HPACK literals
without indexing (RFC 7541 section 6.2.2): no dynamic-table state to keep in step with the peer."""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER = struct.Struct(">BHBBI")  # 24-bit length as (high byte, low 16 bits), type, flags, id
HEADER_SIZE = 9

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = 0, 1, 2, 3, 4, 5, 6, 7
WINDOW_UPDATE, CONTINUATION = 8, 9

END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

# Settings identifiers.
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

# Error codes.
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB

DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
MAX_WINDOW = 2**31 - 1


class ProtocolError(Exception):
    """A connection error (RFC 9113 section 5.4.1): GOAWAY with ``code``, then close."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return HEADER.pack(n >> 16, n & 0xFFFF, kind, flags, stream_id) + payload


def frame_header(kind: int, flags: int, stream_id: int, length: int) -> bytes:
    return HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, struct.pack(">I", code))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream_id, code) + debug)


def ping_ack(opaque: bytes) -> bytes:
    return frame(PING, ACK, 0, opaque)


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 section 5.1: ``value`` with an N-bit prefix, ``first`` holding the high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """One header field, literal without indexing, new name, no Huffman coding."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def header_block(fields: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(literal(name, value) for name, value in fields)


def headers(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """HEADERS, split into CONTINUATION frames where the block exceeds the peer's frame size."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(HEADERS, flags | END_HEADERS, stream_id, block)
    parts = [block[i : i + max_frame] for i in range(0, len(block), max_frame)]
    out = [frame(HEADERS, flags, stream_id, parts[0])]
    for part in parts[1:-1]:
        out.append(frame(CONTINUATION, 0, stream_id, part))
    out.append(frame(CONTINUATION, END_HEADERS, stream_id, parts[-1]))
    return b"".join(out)
