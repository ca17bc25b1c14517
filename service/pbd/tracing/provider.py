"""The daemon's OpenTelemetry tracer provider, configured by the standard ``OTEL_*`` variables.

``OTEL_TRACES_EXPORTER``: ``otlp`` (default; gRPC, ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``,
``_HEADERS``, ``_INSECURE``...), ``console`` or ``none``. ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` make the resource (service name ``pbd`` unless set),
``OTEL_TRACES_SAMPLER[_ARG]`` the SDK's sampler (applied to requests the trace settings
sample), ``OTEL_BSP_*`` the batch span processor; ``OTEL_SDK_DISABLED=true`` turns tracing
off. ``--trace-config opentelemetry,url=...`` / ``resource=k=v`` / ``bsp_*`` set the same,
Triton's way. Spans leave through a batch processor: export runs on its own thread.

Workers send their spans OTLP-encoded (``SpanBatch``); ``import_spans`` turns them back into
SDK spans and hands them to the same processor, so they reach the same exporter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from pbd.tracing.settings import TraceConfig, TraceSettings

log = logging.getLogger("pbd.tracing")


class Tracing:
    """Trace settings plus, when an exporter is configured, the provider spans go through."""

    def __init__(
        self,
        settings: TraceSettings,
        processor: SpanProcessor | None = None,
        resource: Resource | None = None,
    ) -> None:
        self.settings = settings
        self.processor = processor
        self.resource = resource or Resource.create({"service.name": "pbd"})
        self.provider: TracerProvider | None = None
        self.tracer: trace.Tracer | None = None
        if processor is not None:
            self.provider = TracerProvider(resource=self.resource)
            self.provider.add_span_processor(processor)
            self.tracer = self.provider.get_tracer("pbd")

    def sample(self, model: str) -> bool:
        """Whether to trace this request; false without an exporter (no span is created)."""
        return self.tracer is not None and self.settings.sample(model)

    def import_spans(self, otlp: bytes) -> None:
        """Export spans a worker finished (a serialized ExportTraceServiceRequest)."""
        if self.processor is None:
            return
        request = ExportTraceServiceRequest.FromString(otlp)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                scope = InstrumentationScope(scope_spans.scope.name, scope_spans.scope.version)
                for span in scope_spans.spans:
                    self.processor.on_end(_readable(span, scope, self.resource))

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def _context(
    trace_id: bytes, span_id: bytes, remote: bool, flags: int = TraceFlags.SAMPLED
) -> SpanContext:
    return SpanContext(
        int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), remote, TraceFlags(flags)
    )


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _readable(span: Any, scope: InstrumentationScope, resource: Resource) -> ReadableSpan:
    # OTLP's enums start with UNSPECIFIED (kind) / UNSET (status); the SDK's kind starts at
    # INTERNAL.
    kind = SpanKind(max(span.kind - 1, 0))
    status = Status(StatusCode(span.status.code), span.status.message or None)
    return ReadableSpan(
        name=span.name,
        # OTLP's span flags carry the W3C trace flags in their low byte.
        context=_context(span.trace_id, span.span_id, False, (span.flags & 0xFF) or 1),
        parent=_context(span.trace_id, span.parent_span_id, True) if span.parent_span_id else None,
        resource=resource,
        attributes=_attributes(span.attributes),
        events=[Event(e.name, _attributes(e.attributes), e.time_unix_nano) for e in span.events],
        links=[
            Link(_context(lk.trace_id, lk.span_id, True), _attributes(lk.attributes))
            for lk in span.links
        ],
        kind=kind,
        status=status,
        start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano,
        instrumentation_scope=scope,
    )


def _resource(options: Mapping[str, list[str]]) -> Resource:
    resource = Resource.create()
    extra: dict[str, str] = {}
    for item in options.get("resource", []):
        key, _, value = item.partition("=")
        extra[key] = value
    if resource.attributes.get("service.name", "").startswith("unknown_service"):
        extra.setdefault("service.name", "pbd")
    return resource.merge(Resource(extra)) if extra else resource


def _bsp_options(options: Mapping[str, list[str]]) -> dict[str, int]:
    names = {
        "bsp_max_queue_size": "max_queue_size",
        "bsp_schedule_delay": "schedule_delay_millis",
        "bsp_max_export_batch_size": "max_export_batch_size",
    }
    return {names[k]: int(v[-1]) for k, v in options.items() if k in names and v}


def build_tracing(config: TraceConfig, environ: Mapping[str, str] | None = None) -> Tracing:
    """The daemon's tracing from ``--trace-config`` and the ``OTEL_*`` environment."""
    env = os.environ if environ is None else environ
    settings = TraceSettings(config)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Tracing(settings)
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: Any
    if exporter_name == "none":
        return Tracing(settings)
    if exporter_name == "console":
        exporter = ConsoleSpanExporter(service_name="pbd")
    elif exporter_name == "otlp":
        protocol = env.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        )
        if protocol != "grpc":
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: pbd exports OTLP over gRPC only"
            )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        urls = config.options.get("url")
        exporter = OTLPSpanExporter(endpoint=urls[-1]) if urls else OTLPSpanExporter()
    else:
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter_name}: expected otlp, console or none")
    processor = BatchSpanProcessor(exporter, **_bsp_options(config.options))
    return Tracing(settings, processor, _resource(config.options))
