"""Hand-rolled framing of the two big inference messages.

Tensor bytes dominate large requests. Letting protobuf parse ``raw_input_contents`` copies
every tensor into a new ``bytes``; building the response through protobuf copies outputs
twice more. Instead, the top level of ModelInferRequest is walked here: the raw entries
(field 7) become ``memoryview`` slices of the received buffer and the rest is handed to
protobuf. A response is the protobuf-serialized header followed by hand-written field-6
entries; protobuf concatenates repeated fields, so the result is an ordinary message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pbd.grpc.protocol import Buffer

RAW_INPUT_FIELD = 7
RAW_OUTPUT_TAG = bytes([(6 << 3) | 2])  # raw_output_contents, length-delimited
STREAM_RESPONSE_TAG = bytes([(2 << 3) | 2])  # ModelStreamInferResponse.infer_response
_LENGTH_DELIMITED = 2


class WireError(ValueError):
    pass


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def split_raw_inputs(data: Buffer) -> tuple[Buffer, list[memoryview]]:
    """``(message without field 7, [field-7 payloads as views of data])``.

    Every top-level field of ModelInferRequest is length-delimited; anything else is left in
    the header for protobuf to judge.
    """
    buf = memoryview(data)
    raws: list[memoryview] = []
    kept: list[memoryview] = []
    pos = 0
    end = len(buf)
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos)
        if tag & 7 != _LENGTH_DELIMITED:
            # Not a shape this message has at top level: let protobuf parse (and reject) it.
            return data, []
        length, pos = _varint(buf, pos)
        if pos + length > end:
            raise WireError("field length runs past the end of the message")
        if tag >> 3 == RAW_INPUT_FIELD:
            raws.append(buf[pos : pos + length])
        else:
            kept.append(buf[start : pos + length])
        pos += length
    if not raws:
        return data, []
    return b"".join(kept), raws


def join_raw_outputs(header: bytes, raws: Iterable[memoryview | bytes]) -> bytes:
    """A serialized ModelInferResponse: ``header`` plus one field-6 entry per output."""
    parts: list[bytes | memoryview] = [header]
    for raw in raws:
        parts.append(RAW_OUTPUT_TAG)
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
    return b"".join(parts)
