"""The daemon's OpenTelemetry tracer provider, configured by the standard ``OTEL_*`` variables.

``OTEL_TRACES_EXPORTER``: ``otlp`` (default; gRPC or HTTP as ``OTEL_EXPORTER_OTLP_PROTOCOL``
says, HTTP to Triton's ``--trace-config opentelemetry,url=...``;
``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``, ``_HEADERS``, ``_INSECURE``...), ``console`` or
``none``. ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` make the resource (service name ``pbd`` unless set),
``OTEL_TRACES_SAMPLER[_ARG]`` the SDK's sampler (applied to requests the trace settings
sample), ``OTEL_BSP_*`` the batch span processor; ``OTEL_SDK_DISABLED=true`` turns tracing
off. ``--trace-config opentelemetry,url=...`` / ``resource=k=v`` / ``bsp_*`` set the same,
Triton's way. Spans leave through a batch processor: export runs on its own thread; for
OTLP that thread is in an exporter process of its own (``pbd.tracing.shipper``).

Workers send their spans OTLP-encoded (``SpanBatch``); ``import_spans`` hands them to the same
processor, so they reach the same exporter: as they are to pbd's OTLP exporter, which splices
them into its export request, or turned back into SDK spans for any other (see
``pbd.tracing.records``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from pbd.tracing.records import (
    WorkerSpans,
    expand,
    readable_from_otlp,
    readable_spans,
    server_span,
)
from pbd.tracing.settings import TraceConfig, TraceSettings

log = logging.getLogger("pbd.tracing")
OTLP_PROTOCOLS = ("grpc", "http/protobuf")


class Tracing:
    """Trace settings plus, when an exporter is configured, the processor spans go to.

    ``queues_records``: the processor takes pbd's own records as they are (the tuples
    ``RequestTrace`` emits, ``WorkerSpans``: ``pbd.tracing.shipper``'s, for the exporter
    process); otherwise each span becomes an SDK ``ReadableSpan`` first.
    """

    def __init__(
        self,
        settings: TraceSettings,
        processor: SpanProcessor | None = None,
        resource: Resource | None = None,
        *,
        queues_records: bool = False,
    ) -> None:
        self.settings = settings
        self.processor = processor
        self.resource = resource or Resource.create({"service.name": "pbd"})
        self.queues_records = queues_records
        self.provider: TracerProvider | None = None
        self.sampler: Sampler | None = None
        if processor is not None:
            # The provider owns the processor (shutdown) and the sampler (OTEL_TRACES_SAMPLER).
            self.provider = TracerProvider(resource=self.resource)
            self.provider.add_span_processor(processor)
            self.sampler = self.provider.sampler

    def sample(self, model: str) -> bool:
        """Whether to trace this request; false without an exporter (no span is created)."""
        return self.processor is not None and self.settings.sample(model)

    def decide(
        self,
        parent: tuple[int, int, int] | None,
        trace_id: int,
        system: str,
        method: str,
        model: str,
        version: str,
    ) -> tuple[bool, dict[str, Any] | None]:
        """The sampler's decision for a request's server span (SERVER; ``parent``: the
        client's (trace id, span id, flags), remote), and the attributes it adds."""
        assert self.sampler is not None
        context = None
        if parent is not None:
            remote = SpanContext(parent[0], parent[1], True, TraceFlags(parent[2] & 0xFF))
            context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        name, attributes = server_span(system, method, model, version)
        result = self.sampler.should_sample(context, trace_id, name, SpanKind.SERVER, attributes)
        sampled = result.decision is Decision.RECORD_AND_SAMPLE
        # The SDK's samplers hand back the attributes they were given; keep what they add.
        extra = {
            k: v for k, v in (result.attributes or {}).items()
            if k not in attributes or attributes[k] != v
        }  # fmt: skip
        return sampled, extra or None

    def emit(self, record: tuple[Any, ...]) -> None:
        """A sampled request's record (``records.RECORD_FIELDS``), to the processor."""
        if self.processor is None:
            return
        if self.queues_records:
            self.processor.on_end(record)  # type: ignore[arg-type]
            return
        for span in readable_spans(expand(record), self.resource):
            self.processor.on_end(span)

    def import_spans(self, otlp: bytes) -> None:
        """Export spans a worker finished (a serialized ExportTraceServiceRequest)."""
        if self.processor is None:
            return
        if self.queues_records:
            self.processor.on_end(WorkerSpans(otlp))  # type: ignore[arg-type]
            return
        for span in readable_from_otlp(otlp, self.resource):
            self.processor.on_end(span)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def _resource(options: Mapping[str, list[str]]) -> Resource:
    resource = Resource.create()
    extra: dict[str, str] = {}
    for item in options.get("resource", []):
        key, _, value = item.partition("=")
        extra[key] = value
    service_name = resource.attributes.get("service.name", "")
    if isinstance(service_name, str) and service_name.startswith("unknown_service"):
        extra.setdefault("service.name", "pbd")
    return resource.merge(Resource(extra)) if extra else resource


def _bsp_options(options: Mapping[str, list[str]]) -> dict[str, int]:
    names = {
        "bsp_max_queue_size": "max_queue_size",
        "bsp_schedule_delay": "schedule_delay_millis",
        "bsp_max_export_batch_size": "max_export_batch_size",
    }
    return {names[k]: int(v[-1]) for k, v in options.items() if k in names and v}


def batch_processor(exporter: SpanExporter, options: Mapping[str, list[str]]) -> SpanProcessor:
    """The SDK's batch processor with Triton's ``--trace-config opentelemetry,bsp_*=...``
    settings; an unset one keeps the SDK's default (and its ``OTEL_BSP_*`` variable)."""
    bsp = _bsp_options(options)
    return BatchSpanProcessor(
        exporter,
        max_queue_size=bsp.get("max_queue_size"),
        schedule_delay_millis=bsp.get("schedule_delay_millis"),
        max_export_batch_size=bsp.get("max_export_batch_size"),
    )


def otlp_protocol(options: Mapping[str, list[str]], env: Mapping[str, str]) -> str:
    """``grpc`` or ``http/protobuf``: OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL when set; else
    Triton's meaning of ``--trace-config opentelemetry,url=...`` (OTLP over HTTP to that URL);
    else gRPC, the SDK's default."""
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ("http/protobuf" if options.get("url") else "grpc")
    ).strip()
    if protocol not in OTLP_PROTOCOLS:
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: pbd exports OTLP over "
            + " or ".join(OTLP_PROTOCOLS)
        )
    return protocol


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
        otlp_protocol(config.options, env)  # refuses a protocol pbd does not speak
        from pbd.tracing.shipper import DEFAULT_MAX_BATCH, DEFAULT_MAX_QUEUE, ProcessSpanProcessor

        bsp = _bsp_options(config.options)
        queue = int(env.get("OTEL_BSP_MAX_QUEUE_SIZE", "") or DEFAULT_MAX_QUEUE)
        batch = int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "") or DEFAULT_MAX_BATCH)
        processor = ProcessSpanProcessor(
            config.options,
            max_queue_size=bsp.get("max_queue_size", queue),
            max_batch=bsp.get("max_export_batch_size", batch),
        )
        return Tracing(settings, processor, _resource(config.options), queues_records=True)
    else:
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter_name}: expected otlp, console or none")
    return Tracing(settings, batch_processor(exporter, config.options), _resource(config.options))
