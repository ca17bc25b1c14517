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
     └─ response       the response message built from the outputs (one per response of a
                        decoupled request)

Only requests ``Tracing.sample`` picked get a ``RequestTrace``; the rest carry ``None`` and
touch no tracing code. Times are wall-clock nanoseconds (``time.time_ns``), which is what
spans carry; COMPUTE_INPUT_END and COMPUTE_OUTPUT_START come from the worker's measured input
and output durations.

A ``RequestTrace`` notes times and ids only: when the RPC ends it hands ``Tracing.emit`` one
flat tuple (``records.RECORD_FIELDS``), and the spans are built from it where they are
exported (``records.expand``: in the exporter process, for OTLP). The daemon itself makes two
ids per request: the RPC span's, and the compute span's, which the worker's spans take as
their parent; the others are derived from the RPC span's id when the record is expanded.
Building the spans here cost the event loop more than the request itself.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.trace.sampling import DEFAULT_ON

from pbd.tracing.provider import Tracing
from pbd_wire.otlp import new_span_id, new_trace_id, parse_traceparent


class RequestTrace:
    __slots__ = (
        "tracing", "trace_id", "server_id", "parent", "sampled", "extra", "system", "method",
        "model", "version", "start_ns", "queued_ns", "dispatched_ns", "instance", "batch_size",
        "compute_id", "compute_end", "infer_ns", "output_ns", "compute_error", "input_copy",
        "execute", "output_copy", "attributes", "responses",
    )  # fmt: skip

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
        parent = parse_traceparent(traceparent) if traceparent else None
        self.parent = parent
        self.trace_id = parent[0] if parent is not None else new_trace_id()
        self.system, self.method, self.model, self.version = system, method, model, version
        self.extra: dict[str, Any] | None = None
        if tracing.sampler is DEFAULT_ON:
            # The SDK's default, parentbased_always_on, decided without building a context:
            # a remote parent's flag, else sampled.
            self.sampled = parent is None or bool(parent[2] & 1)
        else:
            self.sampled, self.extra = tracing.decide(
                parent, self.trace_id, system, method, model, version
            )
        self.server_id = new_span_id()
        self.start_ns = start_ns
        self.queued_ns = self.dispatched_ns = self.batch_size = 0
        self.compute_id = self.compute_end = self.infer_ns = self.output_ns = 0
        self.instance = ""
        self.compute_error: str | None = None
        self.input_copy: tuple[int, int] | None = None
        self.execute: tuple[Any, ...] | None = None
        self.output_copy: tuple[int, int] | None = None
        self.attributes: dict[str, Any] | None = None
        self.responses: list[tuple[int, int]] = []

    def queued(self) -> None:
        if not self.queued_ns:  # sent back to the queue (its instance died): waits on
            self.queued_ns = time.time_ns()

    def dispatched(self, instance: str, batch_size: int, version: int) -> None:
        """The queue span ends; the compute span starts. ``version``: the one that runs it,
        which the server span reports (the client may have asked for "latest")."""
        self.dispatched_ns = time.time_ns()
        self.version = str(version)
        self.instance, self.batch_size = instance, batch_size
        self.compute_id = new_span_id()

    def input_copied(self, start_ns: int, end_ns: int) -> str:
        """Record the input copy; the traceparent the worker's spans take as parent."""
        assert self.compute_id
        self.input_copy = (start_ns, end_ns)
        return f"00-{self.trace_id:032x}-{self.compute_id:016x}-{'01' if self.sampled else '00'}"

    def computed(self, infer_ns: int, output_ns: int, error: str | None = None) -> None:
        """The worker answered: the compute span ends (its events come from the worker's
        durations)."""
        if self.compute_id and not self.compute_end:
            self.compute_end = time.time_ns()
            self.infer_ns, self.output_ns, self.compute_error = infer_ns, output_ns, error

    def responded(self, start_ns: int) -> None:
        self.responses.append((start_ns, time.time_ns()))

    def finish(self, status_code: int = 0, error: str | None = None) -> None:
        """End the RPC span (``status_code``: the gRPC status number)."""
        end = time.time_ns()
        if self.compute_id and not self.compute_end:  # failed before the worker answered
            self.compute_end, self.infer_ns, self.compute_error = end, -1, error or ""
        if self.sampled:
            self.tracing.emit((
                self.trace_id, self.server_id, self.parent, self.extra, self.system,
                self.method, self.model, self.version, self.start_ns, end, status_code, error,
                self.queued_ns, self.dispatched_ns, self.instance, self.batch_size,
                self.compute_id, self.compute_end, self.infer_ns, self.output_ns,
                self.compute_error, self.input_copy, self.execute, self.output_copy,
                self.attributes, self.responses,
            ))  # fmt: skip


def add_worker_spans(
    traces: list[RequestTrace],
    report: Any,
    output_ns: int,
    attributes: dict[str, Any],
) -> None:
    """The worker's spans of one batch, from its result: ``execute`` (``report``, a
    ``worker_pb2.ExecuteSpan``; in the first traced request's trace, linked to the other
    traced requests' compute spans) and each traced request's ``output_copy``. Call before
    ``computed``."""
    span_id = report.span_id
    if not span_id or not traces:
        return
    end = report.end_ns
    exception = None
    if report.exception_type:
        exception = (report.exception_ns, report.exception_type, report.exception_message,
                     report.exception_stacktrace)  # fmt: skip
    first = traces[0]
    links = tuple((t.trace_id, t.compute_id) for t in traces[1:]) if len(traces) > 1 else ()
    first.execute = (span_id, report.start_ns, end, exception, links)
    output_copy = (end, end + output_ns)
    for trace in traces:
        trace.output_copy = output_copy
        trace.attributes = attributes


def batch_computed(traces: list[RequestTrace], result: Any, attributes: dict[str, Any]) -> None:
    """A batch's ExecuteResult arrived: the worker's spans, then each trace's compute ends."""
    add_worker_spans(traces, result.execute_span, result.output_ns, attributes)
    infer_ns, output_ns = result.infer_ns, result.output_ns
    for trace in traces:
        trace.computed(infer_ns, output_ns)
