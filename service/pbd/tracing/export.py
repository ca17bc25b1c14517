"""pbd's OTLP gRPC span exporter: the SDK's, fed pbd's span records without re-encoding.

The batch processor's queue holds ``TraceRecord`` (the daemon's spans of one request) and
``WorkerSpans`` (a worker's spans, already OTLP bytes) next to any SDK ``ReadableSpan``.
``_translate_data`` builds the export request from them directly, as protobuf bytes parsed
once: records are written into one ResourceSpans under the daemon's resource, a worker's
ScopeSpans are copied over as they are, and SDK spans go through the SDK's encoder.
Transport, retries, headers, TLS and compression stay the SDK exporter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ResourceProto
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.resources import Resource

from pbd.tracing.records import SCOPE, TraceRecord, WorkerSpans, record_span_bytes
from pbd_worker.otlp import field_bytes, length_delimited_fields


class PbdOTLPSpanExporter(OTLPSpanExporter):
    def __init__(self, resource: Resource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # ResourceSpans' resource and schema_url fields, serialized once.
        self._resource_fields = ResourceSpans(
            resource=ResourceProto(attributes=_encode_attributes(resource.attributes)),
            schema_url=resource.schema_url or "",
        ).SerializeToString()
        self._own_scope = field_bytes(1, field_bytes(1, SCOPE.name.encode()))

    def _translate_data(self, data: Sequence[Any]) -> ExportTraceServiceRequest:
        """One ResourceSpans under the daemon's resource: pbd's spans in one ScopeSpans, then
        the workers' ScopeSpans. Built as protobuf bytes and parsed once (protobuf's C code)
        instead of filled field by field."""
        own: list[bytes] = []
        scopes: list[bytes] = []
        sdk_spans = []
        for item in data:
            if isinstance(item, TraceRecord):
                own += record_span_bytes(item)
            elif isinstance(item, WorkerSpans):
                for number, resource_spans in length_delimited_fields(item.otlp):
                    if number == 1:  # ExportTraceServiceRequest.resource_spans
                        scopes += [p for n, p in length_delimited_fields(resource_spans) if n == 2]
            else:
                sdk_spans.append(item)
        own_scope = self._own_scope + b"".join([field_bytes(2, span) for span in own])
        body = [self._resource_fields, field_bytes(2, own_scope)]
        body += [field_bytes(2, scope) for scope in scopes]
        request = ExportTraceServiceRequest.FromString(field_bytes(1, b"".join(body)))
        if sdk_spans:
            request.MergeFrom(encode_spans(sdk_spans))
        return request

    def _count_data(self, data: Sequence[Any]) -> int:
        count = 0
        for item in data:
            if isinstance(item, TraceRecord):
                count += len(item.spans)
            else:
                count += 1
        return count
