"""The BYTES wire form, written down once.

A BYTES tensor travels as its elements in row-major order, each as a 4-byte little-endian
unsigned length followed by that many bytes (the KServe v2 ``raw_*_contents`` encoding). Both the
``Tensor`` type and the public ``serialize_byte_tensor``/``deserialize_bytes_tensor`` helpers use
these two functions.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from pbd_worker.model_api.errors import TritonModelException

_LENGTH = struct.Struct("<I")
_MAX_ELEMENT = 2**32 - 1


def element_bytes(value: Any) -> bytes:
    """One element's bytes: ``bytes`` as they are, text as UTF-8, anything else as ``str()``."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")


def serialize(array: np.ndarray) -> bytes:
    """The wire form of an ``object_``/``bytes_``/``str_`` array, in C order whatever its layout."""
    parts: list[bytes] = []
    for index, value in enumerate(array.flat):
        data = element_bytes(value)
        if len(data) > _MAX_ELEMENT:
            raise TritonModelException(
                f"BYTES element {index} has {len(data)} bytes; at most {_MAX_ELEMENT} fit the "
                "4-byte length prefix"
            )
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize(buffer: Any) -> np.ndarray:
    """A 1-D ``np.object_`` array of ``bytes`` from the wire form in ``buffer``.

    Raises ``TritonModelException`` naming the element and byte offset where the encoding breaks.
    """
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if end - offset < _LENGTH.size:
            raise TritonModelException(
                f"malformed BYTES tensor: element {len(items)} at byte {offset} has a truncated "
                f"length prefix ({end - offset} of {_LENGTH.size} bytes)"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if length > end - offset:
            raise TritonModelException(
                f"malformed BYTES tensor: element {len(items)} at byte {offset - _LENGTH.size} "
                f"declares {length} bytes but only {end - offset} remain"
            )
        items.append(view[offset : offset + length].tobytes())
        offset += length
    # Filling a preallocated array keeps numpy from guessing a shape or a fixed-width dtype.
    out = np.empty(len(items), dtype=np.object_)
    for i, item in enumerate(items):
        out[i] = item
    return out
