"""A traced request's finished spans as plain values, and the two ways they leave.

``RequestTrace`` notes a request's times and ids and hands ``Tracing.emit`` one flat tuple
(``RECORD_FIELDS``); ``expand`` turns it into a ``TraceRecord``, its spans as ``SpanData``
tuples. With pbd's OTLP exporter (``pbd.tracing.export``) the tuple crosses to the exporter
process as it is and is written there straight into OTLP bytes (``encode.encode_record``,
which expands only what it does not write itself); with any other processor (the console
exporter, the SDK's in-memory exporter in tests) each span becomes an SDK ``ReadableSpan``
(``readable_spans``). Worker spans arrive OTLP-encoded and travel the same two ways
(``WorkerSpans`` or ``readable_from_otlp``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from pbd_wire.otlp import (
    KIND_INTERNAL,
    KIND_SERVER,
)

SCOPE = InstrumentationScope("pbd")
RPC_SERVICE = "inference.GRPCInferenceService"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

# What ``RequestTrace.finish`` emits, in this order: a tuple of plain values (``marshal`` takes
# it as it is). parent: (trace id, span id, W3C flags) of the client's span, or None; extra:
# the sampler's attributes, or None; times in ns, 0 where the request never got there;
# infer_ns -1: the worker never answered; input_copy, output_copy: (start, end) or None;
# execute: (span id, start, end, exception, links) from the worker's report, in
# the batch's first traced request only, exception (time, type, message, stack trace) or
# None, links ((trace id, compute span id), ...) of the batch's other traced requests;
# attributes: the instance's (model.name, model.version, model.instance); responses:
# [(start, end), ...].
RECORD_FIELDS = (
    "trace_id", "server_id", "parent", "extra", "system", "method", "model", "version",
    "start_ns", "end_ns", "status_code", "error", "queued_ns", "dispatched_ns", "instance",
    "batch_size", "compute_id", "compute_end", "infer_ns", "output_ns", "compute_error",
    "input_copy", "execute", "output_copy", "attributes", "responses",
)  # fmt: skip


class SpanData(NamedTuple):
    name: str
    span_id: int
    parent_id: int  # 0: the request's parent (the client's span, or none)
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] | None = None
    events: tuple[tuple[str, int, dict[str, Any] | None], ...] = ()
    kind: int = KIND_INTERNAL  # OTLP's number
    error: str | None = None
    links: tuple[tuple[int, int], ...] = ()  # (trace id, span id) of linked spans


class TraceRecord:
    """The daemon's spans of one sampled request: one item in the processor's queue."""

    __slots__ = ("trace_id", "span_id", "parent", "spans")
    # The batch processor drops items whose context is not sampled; every record is (only
    # sampled requests make one), so one context serves them all.
    context = SpanContext(1, 1, False, _SAMPLED)

    def __init__(self, trace_id: int, server_id: int, parent: SpanContext | None) -> None:
        self.trace_id = trace_id
        self.span_id = server_id  # the request's server span
        self.parent = parent
        self.spans: list[SpanData] = []


class WorkerSpans:
    """A worker's finished spans, a serialized ExportTraceServiceRequest, queued as is."""

    __slots__ = ("otlp",)
    context = SpanContext(1, 1, False, _SAMPLED)

    def __init__(self, otlp: bytes) -> None:
        self.otlp = otlp


class EncodedSpans:
    """A request's spans as a ScopeSpans' ``spans`` fields (``encode.encode_record``), queued
    in the exporter process: one bytes object per request, which the garbage collector does
    not walk while the batch processor holds it."""

    __slots__ = ("spans", "count")
    context = SpanContext(1, 1, False, _SAMPLED)

    def __init__(self, spans: bytes, count: int) -> None:
        self.spans = spans
        self.count = count


def server_span(
    system: str,
    method: str,
    model: str,
    version: str,
    status: int | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The name and attributes of a request's server span (``status`` None: as it starts,
    before its status is known). gRPC (and BLS) calls follow the semantic conventions for RPC
    spans, ``method`` the RPC's name; HTTP requests those for HTTP server spans, ``method`` the
    route (``/v2/models/{model}/infer``)."""
    http = system == "http"
    if http:
        name = f"POST {method}"
        attributes: dict[str, Any] = {
            "http.request.method": "POST",
            "http.route": method,
            "url.scheme": "http",
        }
    else:
        name = f"{RPC_SERVICE}/{method}"
        attributes = {"rpc.system": system, "rpc.service": RPC_SERVICE, "rpc.method": method}
    attributes["model.name"] = model
    attributes["model.version"] = version or "-1"
    # Triton's names for the same (its request span's), so existing trace queries match.
    attributes["triton.model_name"] = model
    attributes["triton.model_version"] = int(version) if version.isdigit() else -1
    if extra:
        attributes.update(extra)
    if status is not None and http:
        attributes["http.response.status_code"] = status
        if status >= 400:
            attributes["error.type"] = str(status)
    elif status is not None:
        attributes["rpc.grpc.status_code"] = status
    return name, attributes


def derived_span_id(server_id: int, n: int) -> int:
    """The ``n``-th span id of a request after its RPC span's (n >= 1): the RPC span's
    (random) id with a fixed salt of its own xor-ed in, so a request's ids differ from one
    another, are as random as the RPC span's, and are the same each time the record is
    expanded."""
    return (server_id ^ (_SALTS[n] if n < len(_SALTS) else _splitmix64(n))) or 1


def _splitmix64(n: int) -> int:
    z = (n * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


_MASK = (1 << 64) - 1
_SALTS = [_splitmix64(n) for n in range(64)]


def expand(wire: tuple[Any, ...]) -> TraceRecord:
    """The spans of one request's record (``RECORD_FIELDS``), in the order they ended."""
    (trace_id, server_id, parent, extra, system, method, model, version, start, end, status,
     error, queued, dispatched, instance, batch_size, compute_id, compute_end, infer_ns,
     output_ns, compute_error, input_copy, execute, output_copy, attributes,
     responses) = wire  # fmt: skip
    context = None
    if parent is not None:
        context = SpanContext(parent[0], parent[1], True, TraceFlags(parent[2] & 0xFF))
    record = TraceRecord(trace_id, server_id, context)
    spans = record.spans
    if dispatched and queued:
        spans.append(SpanData("queue", derived_span_id(server_id, 1), server_id, queued,
                              dispatched, None, (("QUEUE_START", queued, None),)))  # fmt: skip
    if input_copy is not None:
        spans.append(SpanData("input_copy", derived_span_id(server_id, 2), compute_id,
                              *input_copy))  # fmt: skip
    if execute is not None:
        span_id, exec_start, exec_end, exception, links = execute
        events: tuple[tuple[str, int, dict[str, Any] | None], ...] = ()
        exec_error = None
        if exception is not None:
            stamp, kind, message, stack = exception
            exec_error = message
            events = (("exception", stamp, {
                "exception.type": kind,
                "exception.message": message,
                "exception.stacktrace": stack,
                "exception.escaped": "False",
            }),)  # fmt: skip
        spans.append(SpanData(
            "execute", span_id, compute_id, exec_start, exec_end,
            {**(attributes or {}), "pbd.batch_size": batch_size}, events, error=exec_error,
            links=tuple((t, s) for t, s in links),
        ))  # fmt: skip
    if output_copy is not None:
        copy_start, copy_end = output_copy
        spans.append(SpanData("output_copy", derived_span_id(server_id, 3), compute_id,
                              copy_start, copy_end, attributes))  # fmt: skip
    if compute_id and compute_end:
        compute_events: tuple[tuple[str, int, None], ...] = (("COMPUTE_START", dispatched, None),)
        if infer_ns >= 0:
            output_start = compute_end - output_ns
            compute_events += (
                ("COMPUTE_INPUT_END", output_start - infer_ns, None),
                ("COMPUTE_OUTPUT_START", output_start, None),
                ("COMPUTE_END", compute_end, None),
            )
        spans.append(SpanData(
            "compute", compute_id, server_id, dispatched, compute_end,
            {"model.instance": instance, "pbd.batch_size": batch_size}, compute_events,
            error=compute_error,
        ))  # fmt: skip
    for n, (response_start, response_end) in enumerate(responses):
        spans.append(SpanData("response", derived_span_id(server_id, 4 + n), server_id,
                              response_start, response_end))  # fmt: skip
    name, server_attributes = server_span(system, method, model, version, status, extra)
    spans.append(SpanData(
        name, server_id, 0, start, end, server_attributes,
        (("REQUEST_START", start, None), ("REQUEST_END", end, None)), KIND_SERVER, error,
    ))  # fmt: skip
    return record


def readable_spans(record: TraceRecord, resource: Resource) -> list[ReadableSpan]:
    trace_id = record.trace_id
    out = []
    for data in record.spans:
        parent = (
            SpanContext(trace_id, data.parent_id, False, _SAMPLED)
            if data.parent_id
            else record.parent
        )
        out.append(
            ReadableSpan(
                name=data.name,
                context=SpanContext(trace_id, data.span_id, False, _SAMPLED),
                parent=parent,
                resource=resource,
                attributes=dict(data.attributes or {}),
                events=[
                    Event(name, attributes or {}, stamp) for name, stamp, attributes in data.events
                ],
                links=[Link(SpanContext(t, span, True, _SAMPLED)) for t, span in data.links],
                kind=SpanKind(data.kind - 1),
                status=Status(StatusCode.ERROR, data.error)
                if data.error is not None
                else Status(StatusCode.UNSET),
                start_time=data.start_ns,
                end_time=data.end_ns,
                instrumentation_scope=SCOPE,
            )
        )
    return out


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


def readable_from_otlp(otlp: bytes, resource: Resource) -> list[ReadableSpan]:
    """SDK spans from a serialized ExportTraceServiceRequest, under ``resource``."""
    out = []
    request = ExportTraceServiceRequest.FromString(otlp)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            scope = InstrumentationScope(scope_spans.scope.name, scope_spans.scope.version)
            out += [_readable(span, scope, resource) for span in scope_spans.spans]
    return out


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
