"""Finished spans written straight into OTLP protobuf messages, without the SDK's encoder.

pbd's own spans (the daemon's five per request, the worker's ``execute`` and
``output_copy``) are known in full when they end: ids, times, attributes and events are plain
values. Building their ``opentelemetry.proto.trace.v1.Span`` messages directly costs a
fraction of going through ``Tracer.start_span`` / ``end`` and the SDK's ``encode_spans``.
The encoding follows the SDK's: ids big-endian, kinds and status codes as OTLP numbers, span
``flags`` telling whether the parent is remote.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
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


def add_attributes(target: Any, attributes: Mapping[str, Any]) -> None:
    """Append ``attributes`` as KeyValues. The same few sets repeat on every span (model
    name, version, instance...), so their encoded KeyValues are kept and copied over."""
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
    target.extend(encoded)


def add_span(
    spans: Any,
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
) -> Any:
    """Append one finished span to ``spans`` (a ScopeSpans' repeated ``spans``)."""
    span = spans.add()
    span.trace_id = trace_id
    span.span_id = span_id.to_bytes(8, "big")
    if parent_id:
        span.parent_span_id = parent_id.to_bytes(8, "big")
    span.name = name
    span.kind = kind  # type: ignore[assignment]
    span.start_time_unix_nano = start_ns
    span.end_time_unix_nano = end_ns
    span.flags = flags
    if attributes:
        add_attributes(span.attributes, attributes)
    for event_name, stamp, event_attributes in events:
        event = span.events.add()
        event.name = event_name
        event.time_unix_nano = stamp
        if event_attributes:
            add_attributes(event.attributes, event_attributes)
    for link_trace, link_span in links:
        link = span.links.add()
        link.trace_id = link_trace
        link.span_id = link_span.to_bytes(8, "big")
        link.flags = FLAGS_REMOTE_PARENT
    if error is not None:
        span.status.code = STATUS_ERROR  # type: ignore[assignment]
        span.status.message = error
    return span


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
