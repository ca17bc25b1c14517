"""Triton's check of a BYTES input's wire form, written once for its two places.

A BYTES tensor travels as its elements, each a 4-byte little-endian length followed by that
many bytes. Triton checks an input's form against its shape before the model runs, wherever
its bytes are: in the request, or in a client's shared-memory region. pbd checks the first
where the request is validated (the daemon, a front end) and the second in the worker, the
only process that maps a client's region. The messages are Triton 2.51's, word for word, in
its order: a cut length prefix, then one element too many, then a cut element, then too few.
"""

from __future__ import annotations

import struct

_LENGTH = struct.Struct("<I")


class BytesInputError(ValueError):
    """A BYTES input whose bytes do not hold its shape's elements (INVALID_ARGUMENT)."""


def check_bytes_input(data: memoryview, count: int, name: str, model: str, log_id: str) -> None:
    """Raise ``BytesInputError`` unless ``data`` is exactly ``count`` well-formed elements.
    ``log_id`` is the request's id as Triton prints it (``<id_unknown>`` for none)."""
    where = f"for inference input '{name}' for model '{model}'"
    pos, seen, end = 0, 0, len(data)
    while pos < end:
        if end - pos < _LENGTH.size:
            raise BytesInputError(
                f"[request id: {log_id}] incomplete string length indicator {where}, expecting "
                f"4 bytes but only {end - pos} bytes available. Please make sure the string "
                "length indicator is in one buffer."
            )
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += _LENGTH.size
        seen += 1
        if seen > count:
            raise BytesInputError(
                f"[request id: {log_id}] unexpected number of string elements {seen} {where}, "
                f"expecting {count}"
            )
        if end - pos < length:
            raise BytesInputError(
                f"incomplete string data for inference input '{name}', expecting string of "
                f"length {length} but only {end - pos} bytes available"
            )
        pos += length
    if seen != count:
        raise BytesInputError(
            f"[request id: {log_id}] expected {count} string elements {where}, got {seen}"
        )
