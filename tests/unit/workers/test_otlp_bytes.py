"""The worker writes its own spans as protobuf bytes by hand (``encode_span``,
``encode_request``); they must be exactly what the protobuf runtime writes for the same span."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span, Status

from pbd_wire.otlp import (
    FLAGS_LOCAL_PARENT,
    FLAGS_REMOTE_PARENT,
    KIND_INTERNAL,
    KIND_SERVER,
    STATUS_ERROR,
    encode_request,
    encode_span,
    encoded_attributes,
)


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
    """The reference: the same span built with protobuf's runtime, appended to ``spans``."""
    fields: dict[str, Any] = {
        "trace_id": trace_id,
        "span_id": span_id.to_bytes(8, "big"),
        "name": name,
        "kind": kind,
        "start_time_unix_nano": start_ns,
        "end_time_unix_nano": end_ns,
        "flags": flags,
    }
    if parent_id:
        fields["parent_span_id"] = parent_id.to_bytes(8, "big")
    if attributes:
        fields["attributes"] = encoded_attributes(attributes)
    if events:
        fields["events"] = [
            Span.Event(
                name=event_name,
                time_unix_nano=stamp,
                attributes=encoded_attributes(event_attributes) if event_attributes else (),
            )
            for event_name, stamp, event_attributes in events
        ]
    if links:
        fields["links"] = [
            Span.Link(
                trace_id=link_trace, span_id=link_span.to_bytes(8, "big"), flags=FLAGS_REMOTE_PARENT
            )
            for link_trace, link_span in links
        ]
    if error is not None:
        fields["status"] = Status(code=STATUS_ERROR, message=error)  # type: ignore[arg-type]
    return spans.add(**fields)


CASES: list[dict[str, Any]] = [
    dict(
        trace_id=b"\x01" * 16, span_id=5, parent_id=7, name="execute",
        start_ns=1_700_000_000_000_000_000, end_ns=1_700_000_000_000_000_999,
        flags=FLAGS_REMOTE_PARENT,
        attributes={"model.name": "m", "model.version": 1, "ok": True, "f": 1.5, "neg": -3},
    ),
    dict(
        trace_id=b"\x02" * 16, span_id=2**64 - 1, parent_id=0, name="é" * 200, start_ns=0,
        end_ns=2, kind=KIND_SERVER,
        events=[("exception", 5, {"exception.type": "ValueError"}), ("QUEUE_START", 6, None)],
        links=[(b"\x03" * 16, 9)], error="boom",
    ),
    dict(trace_id=b"\x02" * 16, span_id=1, parent_id=3, name="", start_ns=1, end_ns=2, error=""),
]  # fmt: skip


@pytest.mark.parametrize("fields", CASES, ids=["attributes", "events-links-error", "empty"])
def test_hand_written_span_bytes_equal_protobufs(fields: dict[str, Any]) -> None:
    expected = ScopeSpans()
    add_span(expected.spans, **fields)
    assert encode_span(**fields) == expected.spans[0].SerializeToString()


def test_request_holds_the_spans_under_one_scope() -> None:
    spans = [encode_span(**fields) for fields in CASES]
    request = ExportTraceServiceRequest.FromString(encode_request("pbd.worker", spans))
    (resource_spans,) = request.resource_spans
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "pbd.worker"
    assert [s.SerializeToString() for s in scope_spans.spans] == spans


def test_length_delimited_fields_walks_a_request_and_refuses_other_wire_types() -> None:
    from pbd_wire.otlp import field_bytes, length_delimited_fields

    spans = [encode_span(**fields) for fields in CASES]
    request = encode_request("s", spans)
    ((number, resource_spans),) = list(length_delimited_fields(request))
    assert number == 1
    assert [n for n, _ in length_delimited_fields(resource_spans)] == [2]
    assert list(length_delimited_fields(field_bytes(3, b"x" * 300))) == [(3, b"x" * 300)]
    with pytest.raises(ValueError):
        list(length_delimited_fields(b"\x08\x01"))  # a varint field
    with pytest.raises(ValueError):
        list(length_delimited_fields(b"\x0a\x05ab"))  # truncated
