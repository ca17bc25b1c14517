"""pbd's OTLP gRPC span exporter: the SDK's, fed pbd's span records without re-encoding
(the request bytes are ``OtlpRequestEncoder``'s, which the OTLP/HTTP exporter posts too).

The exporter process's batch processor holds ``EncodedSpans`` (the daemon's spans of one
request, written by ``encode.encode_record``) and ``WorkerSpans`` (a worker's spans, already
OTLP bytes) next to any SDK ``ReadableSpan``. ``_translate_data`` writes the export request's
bytes from them directly: pbd's spans into one ResourceSpans under the daemon's resource, a
worker's ScopeSpans copied over as they are, SDK spans through the SDK's encoder. The bytes go
out as they are (the stub's Export takes bytes: no message is built, parsed or serialized
again). Transport, retries, headers, TLS and compression stay the SDK exporter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ResourceProto
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.resources import Resource

from pbd.tracing.records import SCOPE, EncodedSpans, WorkerSpans
from pbd_wire.otlp import field_bytes, length_delimited_fields

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class _BytesTraceServiceStub:
    """TraceService's Export, sending a serialized ExportTraceServiceRequest as it is."""

    def __init__(self, channel: Any) -> None:
        self.Export = channel.unary_unary(
            EXPORT_METHOD, response_deserializer=ExportTraceServiceResponse.FromString
        )


class OtlpRequestEncoder:
    """Writes the serialized ExportTraceServiceRequest of a batch: one ResourceSpans under
    the daemon's resource, pbd's spans in one ScopeSpans, then the workers' ScopeSpans."""

    def __init__(self, resource: Resource) -> None:
        # ResourceSpans' resource and schema_url fields, serialized once.
        self._resource_fields = ResourceSpans(
            resource=ResourceProto(attributes=_encode_attributes(resource.attributes)),
            schema_url=resource.schema_url or "",
        ).SerializeToString()
        self._own_scope = field_bytes(1, field_bytes(1, SCOPE.name.encode()))

    def encode(self, data: Sequence[Any]) -> bytes:
        own: list[bytes] = []  # ScopeSpans.spans fields
        scopes: list[bytes] = []
        sdk_spans = []
        for item in data:
            if isinstance(item, EncodedSpans):
                own.append(item.spans)
            elif isinstance(item, WorkerSpans):
                for number, resource_spans in length_delimited_fields(item.otlp):
                    if number == 1:  # ExportTraceServiceRequest.resource_spans
                        scopes += [p for n, p in length_delimited_fields(resource_spans) if n == 2]
            else:
                sdk_spans.append(item)
        own_scope = self._own_scope + b"".join(own)
        body = [self._resource_fields, field_bytes(2, own_scope)]
        body += [field_bytes(2, scope) for scope in scopes]
        request = field_bytes(1, b"".join(body))
        if sdk_spans:  # a message's bytes followed by another's: the two merged
            request += encode_spans(sdk_spans).SerializeToString()
        return request

    @staticmethod
    def count(data: Sequence[Any]) -> int:
        count = 0
        for item in data:
            if isinstance(item, EncodedSpans):
                count += item.count
            else:
                count += 1
        return count


class PbdOTLPSpanExporter(OTLPSpanExporter):
    def __init__(self, resource: Resource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The SDK made its stub on the channel; this one (also after a reconnect) takes bytes.
        self._stub = _BytesTraceServiceStub
        # The SDK's attribute is inferred as None from its own __init__ (it assigns a stub the
        # same way in _initialize_channel_and_stub).
        self._client = _BytesTraceServiceStub(self._channel)  # type: ignore[assignment]
        self._encoder = OtlpRequestEncoder(resource)

    def _translate_data(self, data: Sequence[Any]) -> bytes:  # type: ignore[override]
        return self._encoder.encode(data)

    def _count_data(self, data: Sequence[Any]) -> int:
        return self._encoder.count(data)
