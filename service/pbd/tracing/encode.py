"""pbd's spans as OTLP bytes, for the exporter's request (``pbd.tracing.export``).

``encode_record`` writes a request's record (``records.RECORD_FIELDS``) straight into the
``spans`` fields of a ScopeSpans, from pieces kept per span name, event name and attribute
set, since a daemon's spans repeat those: no span object is made. Records it does not write
itself (an error, an exception, links, sampler attributes, a missing time) are expanded
(``records.expand``) and go through ``record_span_bytes``, which writes a ``TraceRecord``'s
spans the same way and hands the rest to ``encode_span``. A unit test checks all three give
the same bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pbd.tracing.records import SpanData, TraceRecord, derived_span_id, expand, server_span
from pbd_wire.otlp import (
    FLAGS_LOCAL_PARENT,
    FLAGS_REMOTE_PARENT,
    KIND_INTERNAL,
    KIND_SERVER,
    _attribute_bytes,
    _field,
    _varint,
    encode_span,
)


def encode_record(wire: tuple[Any, ...]) -> tuple[bytes, int]:
    """A request's record as ScopeSpans ``spans`` fields (tag, length, Span), and how many
    spans that is; the spans ``expand`` gives, in its order."""
    (trace_id, server_id, parent, extra, system, method, model, version, start, end, status,
     error, queued, dispatched, instance, batch_size, compute_id, compute_end, infer_ns,
     output_ns, compute_error, input_copy, execute, output_copy, attributes,
     responses) = wire  # fmt: skip
    if (
        error is not None
        or compute_error is not None
        or extra
        or (execute is not None and (execute[3] is not None or execute[4]))
        or not (start and end and (queued or not dispatched))
    ):
        return _expanded(wire)
    head = b"\x0a\x10" + trace_id.to_bytes(16, "big") + b"\x12\x08"
    server = server_id.to_bytes(8, "big")
    under_server = b"\x22\x08" + server
    under_compute = b"\x22\x08" + compute_id.to_bytes(8, "big")
    local, times, stamp = _FLAGS_LOCAL, _TIMES.pack, _STAMP.pack
    spans = []
    if dispatched:
        spans.append(b"".join((
            head, derived_span_id(server_id, 1).to_bytes(8, "big"), under_server, _QUEUE,
            times(0x39, queued, 0x41, dispatched), _QUEUE_START[0], stamp(0x09, queued),
            _QUEUE_START[1], local,
        )))  # fmt: skip
    if input_copy is not None:
        spans.append(b"".join((
            head, derived_span_id(server_id, 2).to_bytes(8, "big"), under_compute, _INPUT_COPY,
            times(0x39, input_copy[0], 0x41, input_copy[1]), local,
        )))  # fmt: skip
    if output_copy is not None:
        instance_attributes = _attributes_of(attributes) if attributes else b""
        if execute is not None:
            span_id, exec_start, exec_end = execute[:3]
            spans.append(b"".join((
                head, span_id.to_bytes(8, "big"), under_compute, _EXECUTE,
                times(0x39, exec_start, 0x41, exec_end), instance_attributes,
                _batch_size(batch_size), local,
            )))  # fmt: skip
        spans.append(b"".join((
            head, derived_span_id(server_id, 3).to_bytes(8, "big"), under_compute, _OUTPUT_COPY,
            times(0x39, output_copy[0], 0x41, output_copy[1]), instance_attributes, local,
        )))  # fmt: skip
    elif execute is not None:
        return _expanded(wire)
    if compute_id and compute_end:
        compute = [
            head, compute_id.to_bytes(8, "big"), under_server, _COMPUTE,
            times(0x39, dispatched, 0x41, compute_end), _compute_attributes(instance, batch_size),
            _COMPUTE_START[0], stamp(0x09, dispatched), _COMPUTE_START[1],
        ]  # fmt: skip
        if infer_ns >= 0:
            output_start = compute_end - output_ns
            compute += (
                _COMPUTE_INPUT_END[0], stamp(0x09, output_start - infer_ns), _COMPUTE_INPUT_END[1],
                _COMPUTE_OUTPUT_START[0], stamp(0x09, output_start), _COMPUTE_OUTPUT_START[1],
                _COMPUTE_END[0], stamp(0x09, compute_end), _COMPUTE_END[1],
            )  # fmt: skip
        compute.append(local)
        spans.append(b"".join(compute))
    for n, (response_start, response_end) in enumerate(responses):
        spans.append(b"".join((
            head, derived_span_id(server_id, 4 + n).to_bytes(8, "big"), under_server, _RESPONSE,
            times(0x39, response_start, 0x41, response_end), local,
        )))  # fmt: skip
    if parent is None:
        top_parent, top_flags = b"", local
    else:
        top_parent, top_flags = b"\x22\x08" + parent[1].to_bytes(8, "big"), _FLAGS_REMOTE
    server_head, server_attributes = _server_pieces(system, method, model, version, status)
    spans.append(b"".join((
        head, server, top_parent, server_head, times(0x39, start, 0x41, end), server_attributes,
        _REQUEST_START[0], stamp(0x09, start), _REQUEST_START[1],
        _REQUEST_END[0], stamp(0x09, end), _REQUEST_END[1], top_flags,
    )))  # fmt: skip
    return _spans_fields(spans)


def _expanded(wire: tuple[Any, ...]) -> tuple[bytes, int]:
    return _spans_fields(record_span_bytes(expand(wire)))


def _spans_fields(spans: list[bytes]) -> tuple[bytes, int]:
    """Serialized Spans as ScopeSpans ``spans`` fields (2), and how many."""
    return b"".join([b"\x12" + _varint(len(span)) + span for span in spans]), len(spans)


def _span_fields(record: TraceRecord) -> Iterator[dict[str, Any]]:
    """``encode_span`` arguments for each of the record's spans."""
    trace_id = record.trace_id.to_bytes(16, "big")
    parent = record.parent
    top_parent = parent.span_id if parent is not None else 0
    top_flags = FLAGS_REMOTE_PARENT if parent is not None else FLAGS_LOCAL_PARENT
    for data in record.spans:
        yield {
            "trace_id": trace_id,
            "span_id": data.span_id,
            "parent_id": data.parent_id or top_parent,
            "name": data.name,
            "start_ns": data.start_ns,
            "end_ns": data.end_ns,
            "kind": data.kind,
            "flags": FLAGS_LOCAL_PARENT if data.parent_id else top_flags,
            "attributes": data.attributes,
            "events": data.events,
            "links": [(t.to_bytes(16, "big"), span) for t, span in data.links],
            "error": data.error,
        }


def record_span_bytes(record: TraceRecord) -> list[bytes]:
    """The record's spans as serialized ``Span`` messages: ``encode_span``'s bytes (a unit test
    checks them), written from pieces kept per name, event name and attribute set, since a
    daemon's spans repeat those; a span with links, an error or event attributes goes through
    ``encode_span`` itself."""
    trace_head = b"\x0a\x10" + record.trace_id.to_bytes(16, "big") + b"\x12\x08"
    parent = record.parent
    top_parent = b"\x22\x08" + parent.span_id.to_bytes(8, "big") if parent is not None else b""
    top_flags = _FLAGS_REMOTE if parent is not None else _FLAGS_LOCAL
    out = []
    for data in record.spans:
        name, kind, start, end, attributes, events = (
            data.name, data.kind, data.start_ns, data.end_ns, data.attributes, data.events,
        )  # fmt: skip
        if data.links or data.error is not None or not (name and kind and start and end):
            out.append(_slow_span(record, data))
            continue
        if data.parent_id:
            parts = [trace_head, data.span_id.to_bytes(8, "big"), b"\x22\x08",
                     data.parent_id.to_bytes(8, "big")]  # fmt: skip
            flags = _FLAGS_LOCAL
        else:
            parts = [trace_head, data.span_id.to_bytes(8, "big"), top_parent]
            flags = top_flags
        head = _NAME_KIND.get((name, kind))
        if head is None:
            head = _NAME_KIND[(name, kind)] = (
                _field(b"\x2a", name.encode()) + b"\x30" + _varint(kind)
            )
        parts += (head, _TIMES.pack(0x39, start, 0x41, end))
        if attributes:
            parts.append(_attributes_of(attributes))
        for event_name, stamp, event_attributes in events:
            if event_attributes or not stamp or not event_name:
                break
            pieces = _EVENT[event_name]
            parts += (pieces[0], _STAMP.pack(0x09, stamp), pieces[1])
        else:
            parts.append(flags)
            out.append(b"".join(parts))
            continue
        out.append(_slow_span(record, data))
    return out


def _slow_span(record: TraceRecord, data: SpanData) -> bytes:
    one = TraceRecord(record.trace_id, record.span_id, record.parent)
    one.spans = [data]
    (fields,) = _span_fields(one)
    return encode_span(**fields)


def _attributes_of(attributes: dict[str, Any]) -> bytes:
    """Span attributes' bytes, kept per attribute set (the value types are part of the key:
    True and 1 are equal keys, not equal attributes)."""
    try:
        key = (tuple(attributes.items()), tuple(map(type, attributes.values())))
        return _cached(_ATTRIBUTES, key, lambda: _attribute_bytes(attributes, b"\x4a"))
    except TypeError:  # an unhashable value
        return _attribute_bytes(attributes, b"\x4a")


class _EventPieces(dict[str, tuple[bytes, bytes]]):
    """Event name -> (the Event field's tag and length, its name field): what surrounds the
    timestamp in an event without attributes."""

    def __missing__(self, name: str) -> tuple[bytes, bytes]:
        tail = _field(b"\x12", name.encode())
        pieces = self[name] = (b"\x5a" + _varint(9 + len(tail)), tail)
        return pieces


_TIMES = struct.Struct("<BQBQ")  # start_time_unix_nano (7) and end_time_unix_nano (8)
_STAMP = struct.Struct("<BQ")  # Event.time_unix_nano (1)
_FLAGS_LOCAL = b"\x85\x01" + FLAGS_LOCAL_PARENT.to_bytes(4, "little")
_FLAGS_REMOTE = b"\x85\x01" + FLAGS_REMOTE_PARENT.to_bytes(4, "little")
_NAME_KIND: dict[tuple[str, int], bytes] = {}
_EVENT = _EventPieces()
_ATTRIBUTES: dict[tuple[tuple[Any, ...], tuple[type, ...]], bytes] = {}
_CACHE_MAX = 4096
_Value = TypeVar("_Value")


def _cached(cache: dict[Any, _Value], key: Any, make: Callable[[], _Value]) -> _Value:
    """``cache[key]``, made by ``make`` the first time (a full cache starts over)."""
    found = cache.get(key)
    if found is None:
        found = make()
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = found
    return found


# The request path's lookups: a hit costs one dict get; ``_cached`` (and the maker) only on a
# miss.


def _batch_size(size: int) -> bytes:
    return _BATCH_SIZE.get(size) or _cached(
        _BATCH_SIZE, size, lambda: _attribute_bytes({"pbd.batch_size": size}, b"\x4a")
    )


def _compute_attributes(instance: str, batch_size: int) -> bytes:
    key = (instance, batch_size)
    return _COMPUTE_ATTRIBUTES.get(key) or _cached(
        _COMPUTE_ATTRIBUTES,
        key,
        lambda: _attribute_bytes(
            {"model.instance": instance, "pbd.batch_size": batch_size}, b"\x4a"
        ),
    )


def _server_pieces(
    system: str, method: str, model: str, version: str, status: int
) -> tuple[bytes, bytes]:
    """The server span's name and kind fields, and its attributes'."""
    key = (system, method, model, version, status)
    found = _SERVER.get(key)
    if found is not None:
        return found

    def make() -> tuple[bytes, bytes]:
        name, attributes = server_span(system, method, model, version, status)
        return _name_kind(name, KIND_SERVER), _attribute_bytes(attributes, b"\x4a")

    return _cached(_SERVER, key, make)


def _name_kind(name: str, kind: int) -> bytes:
    return _field(b"\x2a", name.encode()) + b"\x30" + _varint(kind)


_BATCH_SIZE: dict[int, bytes] = {}
_COMPUTE_ATTRIBUTES: dict[tuple[str, int], bytes] = {}
_SERVER: dict[tuple[str, str, str, str, int], tuple[bytes, bytes]] = {}
_QUEUE, _INPUT_COPY, _EXECUTE, _OUTPUT_COPY, _COMPUTE, _RESPONSE = (
    _name_kind(name, KIND_INTERNAL)
    for name in ("queue", "input_copy", "execute", "output_copy", "compute", "response")
)
# Each event: (the Event field's tag and length, its name field); the time goes between.
_QUEUE_START = _EVENT["QUEUE_START"]
_COMPUTE_START = _EVENT["COMPUTE_START"]
_COMPUTE_INPUT_END = _EVENT["COMPUTE_INPUT_END"]
_COMPUTE_OUTPUT_START = _EVENT["COMPUTE_OUTPUT_START"]
_COMPUTE_END = _EVENT["COMPUTE_END"]
_REQUEST_START = _EVENT["REQUEST_START"]
_REQUEST_END = _EVENT["REQUEST_END"]
