"""pbd's direct span encoding says what the SDK path says.

``RequestTrace`` and the worker's ``WorkerTracing`` write spans without the SDK; with pbd's
OTLP exporter they reach the wire through ``PbdOTLPSpanExporter._translate_data``, with any
other processor as SDK spans. Both ways must give the same spans (the SDK path is what the
integration tests check against the span tree).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from pbd.tracing.export import PbdOTLPSpanExporter
from pbd.tracing.export_process import from_wire
from pbd.tracing.provider import Tracing
from pbd.tracing.records import RECORD_FIELDS, readable_from_otlp
from pbd.tracing.request import RequestTrace, add_worker_spans
from pbd.tracing.settings import TraceSettings, parse_trace_config
from pbd.tracing.shipper import to_wire
from pbd_wire import worker_pb2 as wpb
from pbd_wire.otlp import parse_traceparent
from pbd_worker.tracing import WorkerTracing

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Keep(SpanProcessor):
    def __init__(self) -> None:
        self.items: list[Any] = []

    def on_end(self, span: Any) -> None:
        self.items.append(span)


def _one_request(tracing: Tracing, worker: WorkerTracing) -> None:
    request = RequestTrace(
        tracing, method="ModelInfer", model="m", version="", traceparent=PARENT,
        start_ns=time.time_ns(),
    )  # fmt: skip
    request.queued()
    request.dispatched("m_0_0", 1, 1)
    traceparent = request.input_copied(time.time_ns(), time.time_ns())
    result = wpb.ExecuteResult(output_ns=1000)
    with pytest.raises(ValueError), worker.execute_span([traceparent], result.execute_span) as ctx:
        carrier = json.loads(ctx[0].get_context())
        assert carrier["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        with trace.get_tracer("model").start_as_current_span("model.work"):
            pass
        raise ValueError("model failed")
    tracing.import_spans(worker.take_encoded())
    attributes = {"model.name": "m", "model.version": 1, "model.instance": "m_0_0"}
    add_worker_spans([request], result.execute_span, result.output_ns, attributes)
    request.computed(1000, 1000, error="model failed")
    request.responded(time.time_ns())
    request.finish(13, "model failed")


def _key(span: ReadableSpan) -> tuple[Any, ...]:
    parent = span.parent.span_id if span.parent is not None else None
    return (
        span.name, span.context.trace_id, span.context.span_id, parent, span.kind,
        dict(span.attributes or {}), [(e.name, e.timestamp, dict(e.attributes or {}))
                                      for e in span.events],
        span.status.status_code, span.start_time, span.end_time,
    )  # fmt: skip


def test_pbd_exporter_sends_what_the_sdk_path_gets() -> None:
    config = parse_trace_config(["level=TIMESTAMPS", "rate=1"])
    sdk_way, direct_way = Keep(), Keep()
    sdk_tracing = Tracing(TraceSettings(config), sdk_way)
    direct = Tracing(TraceSettings(config), direct_way, queues_records=True)
    worker = WorkerTracing()
    _one_request(direct, worker)
    # The same spans again, through the SDK way: replay the direct way's items.
    for item in direct_way.items:
        if hasattr(item, "otlp"):
            sdk_tracing.import_spans(item.otlp)
        else:
            sdk_tracing.emit(item)
    exporter = PbdOTLPSpanExporter(direct.resource, endpoint="http://127.0.0.1:9")
    try:
        # As the records reach the exporter process's exporter: through the pipe.
        request = exporter._translate_data([from_wire(to_wire(i)) for i in direct_way.items])
    finally:
        exporter.shutdown()
    wire = ExportTraceServiceRequest.FromString(request)
    sent = readable_from_otlp(request, direct.resource)
    names = [s.name for s in sent]
    assert sorted(names) == sorted(
        ["inference.GRPCInferenceService/ModelInfer", "queue", "compute", "input_copy",
         "execute", "model.work", "output_copy", "response"]
    )  # fmt: skip
    assert sorted(map(_key, sent), key=repr) == sorted(map(_key, sdk_way.items), key=repr)
    by_name = {s.name: s for s in sent}
    execute = by_name["execute"]
    assert by_name["model.work"].parent.span_id == execute.context.span_id
    assert [e.name for e in execute.events] == ["exception"]
    assert execute.events[0].attributes["exception.type"] == "ValueError"
    assert execute.status.description == "model failed"
    assert execute.attributes["pbd.batch_size"] == 1
    assert by_name["output_copy"].parent.span_id == by_name["compute"].context.span_id
    server = by_name["inference.GRPCInferenceService/ModelInfer"]
    assert f"{server.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert server.attributes["rpc.grpc.status_code"] == 13
    assert {kv.key for kv in wire.resource_spans[0].resource.attributes} >= {"service.name"}


@pytest.mark.parametrize(
    "traceparent",
    [None, PARENT, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"],
    ids=["no parent", "sampled parent", "unsampled parent"],
)
def test_default_sampler_shortcut_decides_as_the_sdk(traceparent: str | None) -> None:
    """``RequestTrace`` skips the SDK for its default sampler (parentbased_always_on); the
    answer must be the SDK's own, as must ``Tracing.decide``'s, which asks the sampler."""
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision

    tracing = Tracing(TraceSettings(parse_trace_config([])), Keep())
    assert tracing.sampler is DEFAULT_ON
    parsed = parse_traceparent(traceparent) if traceparent else None
    parent = None
    if parsed is not None:
        parent = trace.SpanContext(parsed[0], parsed[1], True, trace.TraceFlags(parsed[2]))
    trace_id = parent.trace_id if parent is not None else 0x1234
    context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
    sdk = DEFAULT_ON.should_sample(context, trace_id, "x", trace.SpanKind.SERVER, {})
    ours = RequestTrace(tracing, method="ModelInfer", model="m", version="",
                        traceparent=traceparent, start_ns=1).sampled  # fmt: skip
    asked, extra = tracing.decide(parsed, trace_id, "grpc", "ModelInfer", "m", "")
    assert ours is asked is (sdk.decision is Decision.RECORD_AND_SAMPLE)
    assert ours is (traceparent != PARENT[:-2] + "00")
    assert extra is None


def test_record_bytes_are_encode_spans_bytes() -> None:
    """The exporter's fast path writes what ``encode_span`` writes, span by span, for the
    shapes it handles itself and those it hands back (links, errors, event attributes)."""
    from opentelemetry.trace import SpanContext, TraceFlags

    from pbd.tracing.encode import _span_fields, record_span_bytes
    from pbd.tracing.records import SpanData, TraceRecord
    from pbd_wire.otlp import KIND_SERVER, encode_span

    now = time.time_ns()
    spans = [
        SpanData("queue", 11, 7, now, now + 5, None, (("QUEUE_START", now, None),)),
        SpanData("compute", 12, 7, now, now + 9, {"model.instance": "m_0", "pbd.batch_size": 2},
                 (("COMPUTE_START", now, None), ("COMPUTE_END", now + 9, None))),
        SpanData("flags", 13, 7, now, now + 1, {"ok": True, "n": 1}),
        SpanData("same keys, int", 14, 7, now, now + 1, {"ok": 1, "n": 1}),
        SpanData("execute", 15, 12, now, now + 3, None, (("exception", now, {"a": "b"}),),
                 error="boom"),
        SpanData("linked", 16, 7, now, now + 2, None, (), links=((5, 6),)),
        SpanData("unnamed event", 17, 7, now, now + 2, None, (("", now, None),)),
        SpanData("server", 7, 0, now, now + 20, {"rpc.method": "ModelInfer"},
                 (("REQUEST_START", now, None), ("REQUEST_END", now + 20, None)), KIND_SERVER),
    ]  # fmt: skip
    for parent in (None, SpanContext(99, 98, True, TraceFlags(1))):
        record = TraceRecord(0x4BF92F3577B34DA6A3CE929D0E0E4736, 7, parent)
        record.spans = spans
        expected = [encode_span(**fields) for fields in _span_fields(record)]
        assert record_span_bytes(record) == expected
        assert record_span_bytes(record) == expected  # again, from the caches


def _wire(**changes: Any) -> tuple[Any, ...]:
    """A record as ``RequestTrace.finish`` emits it: a request through one instance."""
    now = time.time_ns()
    values = {
        "trace_id": 0x4BF92F3577B34DA6A3CE929D0E0E4736, "server_id": 0x1111, "parent": None,
        "extra": None, "system": "grpc", "method": "ModelInfer", "model": "m", "version": "",
        "start_ns": now, "end_ns": now + 900, "status_code": 0, "error": None,
        "queued_ns": now + 10, "dispatched_ns": now + 20, "instance": "m_0_0", "batch_size": 1,
        "compute_id": 0x2222, "compute_end": now + 800, "infer_ns": 500, "output_ns": 100,
        "compute_error": None, "input_copy": (now + 30, now + 40),
        "execute": (0x3333, now + 100, now + 600, None, ()),
        "output_copy": (now + 600, now + 700),
        "attributes": {"model.name": "m", "model.version": 1, "model.instance": "m_0_0"},
        "responses": [(now + 810, now + 850)],
    }  # fmt: skip
    values.update(changes)
    return tuple(values[name] for name in RECORD_FIELDS)


# Written without expand:
_DIRECT = {"plain", "remote parent", "decoupled", "untraced worker", "http", "http 400"}


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="plain"),
        pytest.param(
            {"parent": (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)},
            id="remote parent",
        ),
        pytest.param(
            {"method": "ModelStreamInfer", "version": "3", "batch_size": 4,
             "responses": [(1, 2), (3, 4), (5, 6)]},
            id="decoupled",
        ),
        pytest.param(
            {"execute": None, "output_copy": None, "attributes": None}, id="untraced worker"
        ),
        pytest.param({"responses": [], "status_code": 14, "error": "unavailable"}, id="error"),
        pytest.param(
            {"infer_ns": -1, "compute_error": "", "execute": None, "output_copy": None},
            id="worker never answered",
        ),
        pytest.param(
            {"execute": (0x3333, 1, 2, (3, "ValueError", "bad", "Traceback..."), ())},
            id="exception",
        ),
        pytest.param({"execute": (0x3333, 1, 2, None, ((0x99, 0x98),))}, id="links"),
        pytest.param({"extra": {"sampler.rule": "r1"}}, id="sampler attributes"),
        pytest.param(
            {"system": "http", "method": "/v2/models/{model}/infer", "status_code": 200}, id="http"
        ),
        pytest.param(
            {"system": "http", "method": "/v2/models/{model}/infer", "status_code": 400},
            id="http 400",
        ),
        pytest.param(
            {"system": "http", "method": "/v2/models/{model}/infer", "status_code": 503,
             "error": "overloaded"},
            id="http 503",
        ),
        pytest.param(
            {"queued_ns": 0, "dispatched_ns": 0, "compute_id": 0, "compute_end": 0,
             "input_copy": None, "execute": None, "output_copy": None, "responses": [],
             "status_code": 5, "error": "Request for unknown model"},
            id="never queued",
        ),
    ],
)  # fmt: skip
def test_encoded_record_is_its_expanded_spans(
    changes: dict[str, Any], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``encode_record`` writes, for every shape of record, exactly the spans ``expand``
    makes of it, as ``encode_span`` writes them; the usual shapes without expanding."""
    from pbd.tracing import encode
    from pbd.tracing.encode import _span_fields, encode_record
    from pbd.tracing.records import expand
    from pbd_wire.otlp import encode_span, field_bytes

    if request.node.callspec.id in _DIRECT:
        monkeypatch.setattr(encode, "_expanded", None)  # calling it fails the test
    wire = _wire(**changes)
    record = expand(wire)
    expected = b"".join(field_bytes(2, encode_span(**f)) for f in _span_fields(record))
    assert encode_record(wire) == (expected, len(record.spans))
    assert encode_record(wire) == (expected, len(record.spans))  # again, from the caches
    assert len({span.span_id for span in record.spans}) == len(record.spans)
