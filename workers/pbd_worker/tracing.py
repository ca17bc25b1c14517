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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from pbd_wire import worker_pb2 as wpb
from pbd_wire.otlp import new_span_id, parse_traceparent
from pbd_worker.model_api.request import InferenceTrace

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context


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

    def execute_span(self, traceparents: Sequence[str], report: wpb.ExecuteSpan) -> ExecuteSpan:
        """The ``execute`` span of a batch (``traceparents``: its requests', "" for one that is
        not traced), current while the ``with`` block runs; see ``ExecuteSpan``."""
        return ExecuteSpan(traceparents, report)

    def pending(self) -> bool:
        """Spans the model opened wait to be taken."""
        return self.collector.has_spans()

    def take_encoded(self) -> bytes:
        """Spans the model finished, as a serialized OTLP ``ExportTraceServiceRequest``."""
        model_spans = self.collector.take()
        return encode_spans(model_spans).SerializeToString() if model_spans else b""


class ExecuteSpan:
    """``with`` yields each request's ``InferenceTrace`` (None for a request that is not
    traced), whose ``get_context()`` is the span's context as Triton gives it (JSON with a
    ``traceparent``). A batch of several traced requests is one span, child of the first.
    While the block runs a non-recording span with the span's context is current, so spans the
    model opens are its children; when it ends, ``report`` (the result's ``execute_span``) says
    when it ran and what it raised, and the daemon writes the span."""

    __slots__ = ("trace_id", "traces", "report", "span_id", "flags", "token", "start")

    def __init__(self, traceparents: Sequence[str], report: wpb.ExecuteSpan) -> None:
        parents = [_parse(tp) if tp else None for tp in traceparents]
        # None parses (not from pbd's daemon): nothing is traced, the batch runs as it is.
        trace_id, _parent_id, flags = next((p for p in parents if p is not None), (0, 0, 0))
        self.report, self.trace_id, self.flags = report, trace_id, flags
        self.span_id = span_id = new_span_id()
        self.traces = [InferenceTrace._of(trace_id, span_id, flags) if p is not None else None
                       for p in parents]  # fmt: skip
        self.token: Token[Context] | None = None
        self.start = 0

    def __enter__(self) -> list[InferenceTrace | None]:
        if not self.trace_id:
            return self.traces
        context = SpanContext(self.trace_id, self.span_id, False, TraceFlags(self.flags & 0xFF))
        self.token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
        self.start = time.time_ns()
        return self.traces

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        report = self.report
        if exc is not None:
            report.exception_ns = time.time_ns()
            report.exception_type = type(exc).__qualname__
            report.exception_message = str(exc)
            report.exception_stacktrace = "".join(traceback.format_exception(exc))
        if self.token is None:
            return
        otel_context.detach(self.token)
        if self.flags & 1:
            report.span_id, report.start_ns = self.span_id, self.start
            report.end_ns = time.time_ns()


def _parse(traceparent: str) -> tuple[int, int, int] | None:
    """The daemon's traceparent (always version 00, lowercase) read by position; anything
    else by ``parse_traceparent``."""
    if len(traceparent) == 55 and traceparent[:3] == "00-" and traceparent[35::17] == "--":
        try:
            trace_id, span_id = int(traceparent[3:35], 16), int(traceparent[36:52], 16)
            return trace_id, span_id, int(traceparent[53:], 16)
        except ValueError:
            pass
    return parse_traceparent(traceparent)
