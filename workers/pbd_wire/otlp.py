"""Finished spans written straight as OTLP protobuf bytes, without the SDK's encoder; span
and trace ids; W3C ``traceparent`` text.

pbd's own spans (per request: the RPC, queue, compute, input_copy, execute, output_copy,
response) are known in full when they end: ids, times, attributes and events are plain
values. Writing their ``opentelemetry.proto.trace.v1.Span`` bytes directly (``encode_span``)
costs a fraction of going through ``Tracer.start_span`` / ``end`` and the SDK's
``encode_spans``, and a fraction of filling protobuf messages field by field. The encoding
follows the SDK's: ids big-endian, kinds and status codes as OTLP numbers, span ``flags``
telling whether the parent is remote.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

# OTLP's SpanKind numbers (the SDK's SpanKind is these minus one).
KIND_INTERNAL = 1
KIND_SERVER = 2
STATUS_ERROR = 2
# SpanFlags: the parent's is-remote bit is known (and, with the second, set).
FLAGS_LOCAL_PARENT = 0x100
FLAGS_REMOTE_PARENT = 0x300

_random = random.Random()
_encoded: dict[tuple[tuple[str, Any, type], ...], list[KeyValue]] = {}
_ENCODED_MAX = 4096
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def new_span_id() -> int:
    return _random.getrandbits(64) or 1


def new_trace_id() -> int:
    return _random.getrandbits(128) or 1


def set_value(target: AnyValue, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, list | tuple):
        values = target.array_value.values
        for item in value:
            set_value(values.add(), item)
    else:
        target.string_value = str(value)


def encoded_attributes(attributes: Mapping[str, Any]) -> list[KeyValue]:
    """``attributes`` as KeyValues. The same few sets repeat on every span (model name,
    version, instance...), so their encoded KeyValues are kept and reused."""
    try:
        # The type too: True == 1, but they encode differently.
        key = tuple([(name, value, type(value)) for name, value in attributes.items()])
        encoded = _encoded.get(key)
    except TypeError:  # an unhashable value (a list)
        key, encoded = None, None
    if encoded is None:
        encoded = []
        for name, value in attributes.items():
            kv = KeyValue(key=name)
            set_value(kv.value, value)
            encoded.append(kv)
        if key is not None:
            if len(_encoded) >= _ENCODED_MAX:
                _encoded.clear()
            _encoded[key] = encoded
    return encoded


# -- the same spans as protobuf wire bytes, built directly (the worker's own spans) ----------

_encoded_bytes: dict[tuple[tuple[str, Any, type], ...], bytes] = {}
_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:  # a span's length, mostly
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field ``number`` (below 16) holding ``payload``."""
    return _field(bytes(((number << 3) | 2,)), payload)


def length_delimited_fields(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """``(number, payload)`` of each top-level field of a message whose fields are all
    length-delimited (ExportTraceServiceRequest, ResourceSpans); ValueError otherwise."""
    view, pos, end = memoryview(buf), 0, len(buf)
    while pos < end:
        key, pos = _read_varint(view, pos)
        if key & 7 != 2:
            raise ValueError(f"field {key >> 3} is not length-delimited")
        size, pos = _read_varint(view, pos)
        if pos + size > end:
            raise ValueError("truncated message")
        yield key >> 3, bytes(view[pos : pos + size])
        pos += size


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise ValueError("bad varint")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _attribute_bytes(attributes: Mapping[str, Any], tag: bytes) -> bytes:
    """Encoded KeyValues of ``attributes`` under field ``tag``, kept per attribute set."""
    try:
        key = (tag, *[(name, value, type(value)) for name, value in attributes.items()])
        found = _encoded_bytes.get(key)  # type: ignore[arg-type]
    except TypeError:
        key, found = None, None
    if found is None:
        found = b"".join(
            _field(tag, kv.SerializeToString()) for kv in encoded_attributes(attributes)
        )
        if key is not None:
            if len(_encoded_bytes) >= _ENCODED_MAX:
                _encoded_bytes.clear()
            _encoded_bytes[key] = found  # type: ignore[index]
    return found


def encode_span(
    *,
    trace_id: bytes,
    span_id: int,
    parent_id: int,
    name: str,
    start_ns: int,
    end_ns: int,
    kind: int = KIND_INTERNAL,
    flags: int = FLAGS_LOCAL_PARENT,
    attributes: Mapping[str, Any] | None = None,
    events: Iterable[tuple[str, int, Mapping[str, Any] | None]] = (),
    links: Iterable[tuple[bytes, int]] = (),
    error: str | None = None,
) -> bytes:
    """A finished span as a serialized OTLP ``Span``: the bytes protobuf writes for the same
    message (fields in number order, defaults left out; a unit test checks them against
    protobuf's own encoding)."""
    # proto3 leaves out fields that hold their default (0, ""): so do we.
    parts = [b"\x0a\x10", trace_id, b"\x12\x08", span_id.to_bytes(8, "big")]
    if parent_id:
        parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
    if name:
        parts.append(_field(b"\x2a", name.encode()))
    if kind:
        parts += (b"\x30", _varint(kind))
    if start_ns:
        parts += (b"\x39", _FIXED64.pack(start_ns))
    if end_ns:
        parts += (b"\x41", _FIXED64.pack(end_ns))
    if attributes:
        parts.append(_attribute_bytes(attributes, b"\x4a"))
    for event_name, stamp, event_attributes in events:
        event = [b"\x09", _FIXED64.pack(stamp)] if stamp else []
        if event_name:
            event.append(_field(b"\x12", event_name.encode()))
        if event_attributes:
            event.append(_attribute_bytes(event_attributes, b"\x1a"))
        parts.append(_field(b"\x5a", b"".join(event)))
    for link_trace, link_span in links:
        link = b"\x0a\x10" + link_trace + b"\x12\x08" + link_span.to_bytes(8, "big")
        parts.append(_field(b"\x6a", link + b"\x35" + _FIXED32.pack(FLAGS_REMOTE_PARENT)))
    if error is not None:
        status = _field(b"\x12", error.encode()) if error else b""
        parts.append(_field(b"\x7a", status + b"\x18" + _varint(STATUS_ERROR)))
    if flags:
        parts += (b"\x85\x01", _FIXED32.pack(flags))
    return b"".join(parts)


def encode_request(scope_name: str, spans: Iterable[bytes]) -> bytes:
    """A serialized ExportTraceServiceRequest: one ResourceSpans, one ScopeSpans of ``spans``."""
    scope = _field(b"\x0a", _field(b"\x0a", scope_name.encode()))
    scope_spans = scope + b"".join(_field(b"\x12", span) for span in spans)
    return _field(b"\x0a", _field(b"\x12", scope_spans))


def parse_traceparent(traceparent: str) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, flags)`` of a W3C ``traceparent``, None if it is not valid."""
    match = _TRACEPARENT.match(traceparent.strip())
    if match is None or match[1] == "ff" or (match[1] == "00" and match[5]):
        return None
    trace_id, span_id = int(match[2], 16), int(match[3], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(match[4], 16)


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
