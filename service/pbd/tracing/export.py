"""pbd's OTLP gRPC span exporter: the SDK's, fed pbd's span records without re-encoding.

The batch processor's queue holds ``TraceRecord`` (the daemon's spans of one request) and
``WorkerSpans`` (a worker's spans, already OTLP bytes) next to any SDK ``ReadableSpan``.
``_translate_data`` builds the export request from them directly: records are written into
one ResourceSpans under the daemon's resource, a worker's ScopeSpans are copied over as they
are (protobuf's C code), and SDK spans go through the SDK's encoder. Transport, retries,
headers, TLS and compression stay the SDK exporter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource

from pbd.tracing.records import SCOPE, TraceRecord, WorkerSpans, encode_record


class PbdOTLPSpanExporter(OTLPSpanExporter):
    def __init__(self, resource: Resource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._resource_attributes = _encode_attributes(resource.attributes)
        self._schema_url = resource.schema_url

    def _translate_data(self, data: Sequence[Any]) -> ExportTraceServiceRequest:
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(self._resource_attributes)
        if self._schema_url:
            resource_spans.schema_url = self._schema_url
        own = resource_spans.scope_spans.add()
        own.scope.name = SCOPE.name
        sdk_spans = []
        for item in data:
            if isinstance(item, TraceRecord):
                encode_record(item, own.spans)
            elif isinstance(item, WorkerSpans):
                for worker in ExportTraceServiceRequest.FromString(item.otlp).resource_spans:
                    resource_spans.scope_spans.extend(worker.scope_spans)
            else:
                sdk_spans.append(item)
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
