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
     └─ response       the response message built from the outputs

Only requests ``Tracing.sample`` picked get a ``RequestTrace``; the rest carry ``None`` and
touch no OpenTelemetry code. Times are wall-clock nanoseconds (``time.time_ns``), which is
what spans carry; COMPUTE_INPUT_END and COMPUTE_OUTPUT_START come from the worker's measured
input and output durations.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pbd.tracing.provider import Tracing

_PROPAGATOR = TraceContextTextMapPropagator()
RPC_SERVICE = "inference.GRPCInferenceService"


def traceparent_of(span: trace.Span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


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
        assert tracing.tracer is not None
        self.tracer = tracing.tracer
        parent = _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
        attributes: dict[str, Any] = {
            "rpc.system": system,
            "rpc.service": RPC_SERVICE,
            "rpc.method": method,
            "model.name": model,
            "model.version": version or "-1",
        }
        self.server = self.tracer.start_span(
            f"{RPC_SERVICE}/{method}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=start_ns,
        )
        self.server.add_event("REQUEST_START", timestamp=start_ns)
        self._context = trace.set_span_in_context(self.server)
        self.queued_ns = 0
        self.compute: trace.Span | None = None

    def queued(self) -> None:
        self.queued_ns = time.time_ns()

    def dispatched(self, instance: str, batch_size: int) -> None:
        """The queue span ends; the compute span starts."""
        now = time.time_ns()
        queue = self.tracer.start_span("queue", context=self._context, start_time=self.queued_ns)
        queue.add_event("QUEUE_START", timestamp=self.queued_ns)
        queue.end(end_time=now)
        self.compute = self.tracer.start_span(
            "compute",
            context=self._context,
            attributes={"model.instance": instance, "pbd.batch_size": batch_size},
            start_time=now,
        )
        self.compute.add_event("COMPUTE_START", timestamp=now)

    def input_copied(self, start_ns: int, end_ns: int) -> str:
        """Record the input copy; the traceparent the worker's spans take as parent."""
        assert self.compute is not None
        context = trace.set_span_in_context(self.compute)
        span = self.tracer.start_span("input_copy", context=context, start_time=start_ns)
        span.end(end_time=end_ns)
        return traceparent_of(self.compute)

    def computed(self, infer_ns: int, output_ns: int, error: str | None = None) -> None:
        """The worker answered: derive its timestamps from its durations, end compute."""
        if self.compute is None:
            return
        end = time.time_ns()
        output_start = end - output_ns
        self.compute.add_event("COMPUTE_INPUT_END", timestamp=output_start - infer_ns)
        self.compute.add_event("COMPUTE_OUTPUT_START", timestamp=output_start)
        self.compute.add_event("COMPUTE_END", timestamp=end)
        if error:
            self.compute.set_status(Status(StatusCode.ERROR, error))
        self.compute.end(end_time=end)
        self.compute = None

    def responded(self, start_ns: int) -> None:
        span = self.tracer.start_span("response", context=self._context, start_time=start_ns)
        span.end()

    def finish(self, status_code: int = 0, error: str | None = None) -> None:
        """End the RPC span (``status_code``: the gRPC status number)."""
        if self.compute is not None:  # failed before the worker answered
            self.compute.set_status(Status(StatusCode.ERROR, error))
            self.compute.end()
            self.compute = None
        now = time.time_ns()
        self.server.set_attribute("rpc.grpc.status_code", status_code)
        if error is not None:
            self.server.set_status(Status(StatusCode.ERROR, error))
        self.server.add_event("REQUEST_END", timestamp=now)
        self.server.end(end_time=now)
