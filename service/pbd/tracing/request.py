"""The spans of one traced request, from the RPC to the worker and back.

::

    <rpc>  (SERVER: rpc.system, rpc.service, rpc.method, rpc.grpc.status_code; model name and
     │      version; events REQUEST_START, REQUEST_END)
     ├─ queue          (QUEUE_START) from submit to dispatch
     ├─ compute        (model.instance, pbd.batch_size; COMPUTE_START, COMPUTE_INPUT_END,
     │   │              COMPUTE_OUTPUT_START, COMPUTE_END)
     │   ├─ input_copy     the request's tensors copied into the instance's arena
     │   ├─ execute        in the worker: the model's execute(), current there, so spans the
     │   │    └─ ...        model opens with the OpenTelemetry API are its children
     │   └─ output_copy    in the worker: outputs written into shared memory
     │                     (both written here from the times the worker's result reports)
     └─ response       the response message built from the outputs

Only requests ``Tracing.sample`` picked get a ``RequestTrace``; the rest carry ``None`` and
touch no OpenTelemetry code. Times are wall-clock nanoseconds (``time.time_ns``), which is
what spans carry; COMPUTE_INPUT_END and COMPUTE_OUTPUT_START come from the worker's measured
input and output durations.

The spans are not SDK spans: ids come from ``pbd_worker.otlp``, the tracer provider's sampler
decides once for the request (as it would for the RPC span), and the finished spans are plain
``SpanData`` handed to ``Tracing.emit`` together when the RPC span ends. Going through
``Tracer.start_span``/``end`` for each of them cost more than the request itself.
"""

from __future__ import annotations

import time
from typing import Any

from pbd.tracing.provider import Tracing
from pbd.tracing.records import SpanData, TraceRecord
from pbd_worker.otlp import KIND_SERVER, format_traceparent, new_span_id, new_trace_id

RPC_SERVICE = "inference.GRPCInferenceService"


class RequestTrace:
    def __init__(
        self,
        tracing: Tracing,
        *,
        method: str,
        model: str,
        version: str,
        traceparent: str | None,
        start_ns: int,
        system: str = "grpc",
    ) -> None:
        self.tracing = tracing
        self.name = f"{RPC_SERVICE}/{method}"
        self.attributes: dict[str, Any] = {
            "rpc.system": system,
            "rpc.service": RPC_SERVICE,
            "rpc.method": method,
            "model.name": model,
            "model.version": version or "-1",
        }
        parent = tracing.parent_context(traceparent) if traceparent else None
        trace_id = parent.trace_id if parent is not None else new_trace_id()
        self.sampled = tracing.decide(parent, trace_id, self.name, self.attributes)
        self.server_id = new_span_id()
        self.record = TraceRecord(trace_id, self.server_id, parent)
        self.start_ns = start_ns
        self.queued_ns = 0
        self.compute_id = 0
        self.compute_start = 0
        self.compute_attributes: dict[str, Any] | None = None

    def _add(self, span: SpanData) -> None:
        self.record.spans.append(span)

    def queued(self) -> None:
        self.queued_ns = time.time_ns()

    def dispatched(self, instance: str, batch_size: int) -> None:
        """The queue span ends; the compute span starts."""
        now = time.time_ns()
        queued = self.queued_ns
        self._add(
            SpanData("queue", new_span_id(), self.server_id, queued, now,
                     events=(("QUEUE_START", queued, None),))
        )  # fmt: skip
        self.compute_id = new_span_id()
        self.compute_start = now
        self.compute_attributes = {"model.instance": instance, "pbd.batch_size": batch_size}

    def input_copied(self, start_ns: int, end_ns: int) -> str:
        """Record the input copy; the traceparent the worker's spans take as parent."""
        assert self.compute_id
        self._add(SpanData("input_copy", new_span_id(), self.compute_id, start_ns, end_ns))
        return format_traceparent(self.record.trace_id, self.compute_id, 1 if self.sampled else 0)

    def _end_compute(
        self, end: int, events: tuple[tuple[str, int, None], ...], error: str | None
    ) -> None:
        start = self.compute_start
        self._add(
            SpanData("compute", self.compute_id, self.server_id, start, end,
                     self.compute_attributes, (("COMPUTE_START", start, None), *events),
                     error=error)
        )  # fmt: skip
        self.compute_id = 0

    def computed(self, infer_ns: int, output_ns: int, error: str | None = None) -> None:
        """The worker answered: derive its timestamps from its durations, end compute."""
        if not self.compute_id:
            return
        end = time.time_ns()
        output_start = end - output_ns
        self._end_compute(
            end,
            (
                ("COMPUTE_INPUT_END", output_start - infer_ns, None),
                ("COMPUTE_OUTPUT_START", output_start, None),
                ("COMPUTE_END", end, None),
            ),
            error,
        )

    def responded(self, start_ns: int) -> None:
        self._add(SpanData("response", new_span_id(), self.server_id, start_ns, time.time_ns()))

    def finish(self, status_code: int = 0, error: str | None = None) -> None:
        """End the RPC span (``status_code``: the gRPC status number)."""
        if self.compute_id:  # failed before the worker answered
            self._end_compute(time.time_ns(), (), error or "")
        now = time.time_ns()
        self.attributes["rpc.grpc.status_code"] = status_code
        self._add(
            SpanData(self.name, self.server_id, 0, self.start_ns, now, self.attributes,
                     (("REQUEST_START", self.start_ns, None), ("REQUEST_END", now, None)),
                     KIND_SERVER, error)
        )  # fmt: skip
        if self.sampled:
            self.tracing.emit(self.record)


def add_worker_spans(
    traces: list[RequestTrace],
    report: Any,
    output_ns: int,
    batch_size: int,
    attributes: dict[str, Any],
) -> None:
    """The worker's spans of one batch, from its result: ``execute`` (``report``, a
    ``worker_pb2.ExecuteSpan``; in the first traced request's trace, linked to the other
    traced requests' compute spans) and each traced request's ``output_copy``. Call before
    ``computed``."""
    if not report.span_id or not traces:
        return
    first = traces[0]
    events: tuple[tuple[str, int, dict[str, Any] | None], ...] = ()
    error = None
    if report.exception_type:
        error = report.exception_message
        events = (
            ("exception", report.exception_ns, {
                "exception.type": report.exception_type,
                "exception.message": report.exception_message,
                "exception.stacktrace": report.exception_stacktrace,
                "exception.escaped": "False",
            }),
        )  # fmt: skip
    first._add(
        SpanData("execute", report.span_id, first.compute_id, report.start_ns, report.end_ns,
                 {**attributes, "pbd.batch_size": batch_size}, events, error=error,
                 links=tuple((t.record.trace_id, t.compute_id) for t in traces[1:]))
    )  # fmt: skip
    start, end = report.end_ns, report.end_ns + output_ns
    for trace in traces:
        trace._add(SpanData("output_copy", new_span_id(), trace.compute_id, start, end, attributes))


def batch_computed(
    traces: list[RequestTrace], result: Any, batch_size: int, attributes: dict[str, Any]
) -> None:
    """A batch's ExecuteResult arrived: the worker's spans, then each trace's compute ends."""
    add_worker_spans(traces, result.execute_span, result.output_ns, batch_size, attributes)
    for trace in traces:
        trace.computed(result.infer_ns, result.output_ns)
