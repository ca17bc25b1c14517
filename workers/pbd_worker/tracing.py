"""Spans in the worker: the model's ``execute`` and output copy, and whatever the model opens.

Nothing here is imported until the daemon sends a traced request (``Request.traceparent``
set): an untraced worker never loads the OpenTelemetry SDK. On the first traced request the
SDK's ``TracerProvider`` becomes the process's global provider, so model code that calls
``opentelemetry.trace.get_tracer(...).start_as_current_span(...)`` records real spans, children
of the ``execute`` span that is current while ``execute()`` runs (spans opened outside a
traced request have no sampled parent and are not recorded). The provider's one span
processor only collects finished spans; after each batch the runtime sends them to the daemon
OTLP-encoded (``SpanBatch``), and the daemon exports them. No exporter is imported here.
pbd's own two spans (``execute``, ``output_copy``) bypass the SDK: kept as plain values and
written straight into the OTLP message (``pbd_worker.otlp``) once the batch's result is sent;
the SDK's encoder runs only for model spans.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from pbd_worker.otlp import (
    FLAGS_REMOTE_PARENT,
    encode_request,
    encode_span,
    format_traceparent,
    new_span_id,
    parse_traceparent,
)

SCOPE = "pbd.worker"


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
    def __init__(self, attributes: dict[str, Any]) -> None:
        self.collector = _Collector()
        # Spans follow their parent's decision; a span the model opens outside a traced
        # request (no parent) is not recorded.
        provider = TracerProvider(sampler=ParentBased(root=ALWAYS_OFF))
        provider.add_span_processor(self.collector)
        trace.set_tracer_provider(provider)
        self.attributes = attributes
        # pbd's own finished spans, as add_span's arguments: encoded by take_encoded, which
        # the runtime calls after the batch's result went out (off the request's path).
        self._finished: list[dict[str, Any]] = []

    @contextmanager
    def execute_span(self, traceparents: Sequence[str], batch_size: int) -> Iterator[list[str]]:
        """The ``execute`` span, current for the block; yields each request's trace context
        as ``InferenceTrace.get_context()`` returns it (JSON with a ``traceparent``; "" for a
        request that is not traced). A batch of several traced requests is one span, child of
        the first, linked to the others. The span is written straight into the OTLP message
        when the block ends; while it runs, a non-recording span with its context is current,
        so spans the model opens are its children."""
        parents = [parse_traceparent(tp) if tp else None for tp in traceparents]
        traced = [p for p in parents if p is not None]
        trace_id, parent_id, flags = traced[0]
        span_id = new_span_id()
        sampled = bool(flags & 1)
        context = SpanContext(trace_id, span_id, False, TraceFlags(flags & 0xFF))
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
        # What json.dumps({"traceparent": ...}) gives, without its encoder.
        mine = f'{{"traceparent": "{format_traceparent(trace_id, span_id, flags & 0xFF)}"}}'
        start = time.time_ns()
        error: str | None = None
        events: list[tuple[str, int, dict[str, Any] | None]] = []
        try:
            yield [mine if p is not None else "" for p in parents]
        except BaseException as exc:
            error = str(exc)
            events.append(("exception", time.time_ns(), _exception_attributes(exc)))
            raise
        finally:
            otel_context.detach(token)
            if sampled:
                self._finished.append(
                    dict(
                        trace_id=trace_id.to_bytes(16, "big"),
                        span_id=span_id,
                        parent_id=parent_id,
                        name="execute",
                        start_ns=start,
                        end_ns=time.time_ns(),
                        flags=FLAGS_REMOTE_PARENT,
                        attributes={**self.attributes, "pbd.batch_size": batch_size},
                        events=events,
                        links=[(t.to_bytes(16, "big"), s) for t, s, _ in traced[1:]],
                        error=error,
                    )
                )

    def record(self, name: str, traceparent: str, start_ns: int, end_ns: int) -> None:
        """A span that already happened (its times measured by the caller)."""
        parent = parse_traceparent(traceparent)
        if parent is None or not parent[2] & 1:
            return
        self._finished.append(
            dict(
                trace_id=parent[0].to_bytes(16, "big"),
                span_id=new_span_id(),
                parent_id=parent[1],
                name=name,
                start_ns=start_ns,
                end_ns=end_ns,
                flags=FLAGS_REMOTE_PARENT,
                attributes=self.attributes,
            )
        )

    def pending(self) -> bool:
        """Spans wait to be taken (pbd's own; model spans are checked by take_encoded)."""
        return bool(self._finished) or self.collector.has_spans()

    def take_encoded(self) -> bytes:
        """Finished spans as a serialized OTLP ``ExportTraceServiceRequest`` ("" if none)."""
        model_spans = self.collector.take()
        finished, self._finished = self._finished, []
        if not model_spans and not finished:
            return b""
        otlp = (
            encode_request(SCOPE, [encode_span(**span) for span in finished]) if finished else b""
        )
        if model_spans:
            # Serialized messages concatenate into one (their resource_spans append).
            otlp += encode_spans(model_spans).SerializeToString()
        return otlp


def _exception_attributes(exc: BaseException) -> dict[str, Any]:
    """What the SDK's ``record_exception`` puts on its ``exception`` event."""
    return {
        "exception.type": type(exc).__qualname__,
        "exception.message": str(exc),
        "exception.stacktrace": "".join(traceback.format_exception(exc)),
        "exception.escaped": "False",
    }
