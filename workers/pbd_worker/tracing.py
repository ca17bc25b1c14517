"""Spans in the worker: the model's ``execute``, and whatever the model opens.

Nothing here is imported until the daemon sends a traced request (``Request.traceparent``
set): an untraced worker never loads the OpenTelemetry SDK. On the first traced request the
SDK's ``TracerProvider`` becomes the process's global provider, so model code that calls
``opentelemetry.trace.get_tracer(...).start_as_current_span(...)`` records real spans, children
of the ``execute`` span that is current while ``execute()`` runs (spans opened outside a
traced request have no sampled parent and are not recorded). The provider's one span
processor only collects finished spans; after each batch the runtime sends them to the daemon
OTLP-encoded (``SpanBatch``), and the daemon exports them. No exporter is imported here.
pbd's own spans (``execute``, ``output_copy``) are not built here at all: the batch's result
says when execute() ran, under which span id, and what it raised (``ExecuteResult.
execute_span``), and the daemon writes them into the requests' traces with its own spans.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from pbd_worker._proto import worker_pb2 as wpb
from pbd_worker.otlp import format_traceparent, new_span_id, parse_traceparent


class _Collector(SpanProcessor):
    """Keeps finished spans until the runtime takes them (model threads may end spans too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)

    def has_spans(self) -> bool:
        return bool(self._spans)

    def take(self) -> list[ReadableSpan]:
        with self._lock:
            spans, self._spans = self._spans, []
        return spans


class WorkerTracing:
    def __init__(self) -> None:
        self.collector = _Collector()
        # Spans follow their parent's decision; a span the model opens outside a traced
        # request (no parent) is not recorded.
        provider = TracerProvider(sampler=ParentBased(root=ALWAYS_OFF))
        provider.add_span_processor(self.collector)
        trace.set_tracer_provider(provider)

    @contextmanager
    def execute_span(
        self, traceparents: Sequence[str], report: wpb.ExecuteSpan
    ) -> Iterator[list[str]]:
        """The ``execute`` span, current for the block; yields each request's trace context
        as ``InferenceTrace.get_context()`` returns it (JSON with a ``traceparent``; "" for a
        request that is not traced). A batch of several traced requests is one span, child of
        the first. While the block runs a non-recording span with its context is current, so
        spans the model opens are its children; when it ends, ``report`` (the result's
        ``execute_span``) says when it ran and what it raised, and the daemon writes the span."""
        parents = [parse_traceparent(tp) if tp else None for tp in traceparents]
        trace_id, _parent_id, flags = next(p for p in parents if p is not None)
        span_id = new_span_id()
        context = SpanContext(trace_id, span_id, False, TraceFlags(flags & 0xFF))
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
        # What json.dumps({"traceparent": ...}) gives, without its encoder.
        mine = f'{{"traceparent": "{format_traceparent(trace_id, span_id, flags & 0xFF)}"}}'
        start = time.time_ns()
        try:
            yield [mine if p is not None else "" for p in parents]
        except BaseException as exc:
            report.exception_ns = time.time_ns()
            report.exception_type = type(exc).__qualname__
            report.exception_message = str(exc)
            report.exception_stacktrace = "".join(traceback.format_exception(exc))
            raise
        finally:
            otel_context.detach(token)
            if flags & 1:
                report.span_id, report.start_ns, report.end_ns = span_id, start, time.time_ns()

    def pending(self) -> bool:
        """Spans the model opened wait to be taken."""
        return self.collector.has_spans()

    def take_encoded(self) -> bytes:
        """Spans the model finished, as a serialized OTLP ``ExportTraceServiceRequest``."""
        model_spans = self.collector.take()
        return encode_spans(model_spans).SerializeToString() if model_spans else b""
