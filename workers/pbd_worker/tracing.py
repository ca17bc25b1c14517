"""Spans in the worker: the model's ``execute`` and output copy, and whatever the model opens.

Nothing here is imported until the daemon sends a traced request (``Request.traceparent``
set): an untraced worker never loads the OpenTelemetry SDK. On the first traced request the
SDK's ``TracerProvider`` becomes the process's global provider, so model code that calls
``opentelemetry.trace.get_tracer(...).start_as_current_span(...)`` records real spans, children
of the ``execute`` span that is current while ``execute()`` runs (spans opened outside a
traced request have no sampled parent and are not recorded). The provider's one span
processor only collects finished spans; after each batch the runtime sends them to the daemon
OTLP-encoded (``SpanBatch``), and the daemon exports them. No exporter is imported here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


class _Collector(SpanProcessor):
    """Keeps finished spans until the runtime takes them (model threads may end spans too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)

    def take(self) -> list[ReadableSpan]:
        with self._lock:
            spans, self._spans = self._spans, []
        return spans


class WorkerTracing:
    def __init__(self, attributes: dict[str, Any]) -> None:
        self.collector = _Collector()
        # Spans follow their parent's decision; a span the model opens outside a traced
        # request (no parent) is not recorded.
        provider = TracerProvider(sampler=ParentBased(root=ALWAYS_OFF))
        provider.add_span_processor(self.collector)
        trace.set_tracer_provider(provider)
        self.tracer = provider.get_tracer("pbd.worker")
        self.attributes = attributes

    @contextmanager
    def execute_span(self, traceparents: Sequence[str], batch_size: int) -> Iterator[list[str]]:
        """The ``execute`` span, current for the block; yields each request's trace context
        as ``InferenceTrace.get_context()`` returns it (JSON with a ``traceparent``; "" for a
        request that is not traced). A batch of several traced requests is one span, child of
        the first, linked to the others."""
        parents = [_PROPAGATOR.extract({"traceparent": tp}) if tp else None for tp in traceparents]
        traced = [p for p in parents if p is not None]
        links = [trace.Link(trace.get_current_span(p).get_span_context()) for p in traced[1:]]
        span = self.tracer.start_span(
            "execute",
            context=traced[0],
            kind=trace.SpanKind.INTERNAL,
            attributes={**self.attributes, "pbd.batch_size": batch_size},
            links=links,
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        mine = json.dumps(carrier)
        try:
            yield [mine if p is not None else "" for p in parents]
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def record(self, name: str, traceparent: str, start_ns: int, end_ns: int) -> None:
        """A span that already happened (its times measured by the caller)."""
        span = self.tracer.start_span(
            name,
            context=_PROPAGATOR.extract({"traceparent": traceparent}),
            attributes=self.attributes,
            start_time=start_ns,
        )
        span.end(end_time=end_ns)

    def take_encoded(self) -> bytes:
        """Finished spans as a serialized OTLP ``ExportTraceServiceRequest`` ("" if none)."""
        spans = self.collector.take()
        if not spans:
            return b""
        return encode_spans(spans).SerializeToString()
