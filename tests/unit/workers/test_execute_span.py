"""The worker's execute span: the daemon's traceparent read by position as the W3C parser
reads it, the model's context made on demand, and a traceparent nobody can read leaving the
batch untraced instead of failing it."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace

from pbd_wire import worker_pb2 as wpb
from pbd_wire.otlp import format_traceparent, parse_traceparent
from pbd_worker.tracing import ExecuteSpan, WorkerTracing, _parse


@pytest.mark.parametrize(
    "traceparent",
    [
        format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1),
        format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 0),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # not 55 long
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # another version
        "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",  # not a separator
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333z-01",  # not hex
        "",
    ],
)
def test_positional_read_agrees_with_the_parser(traceparent: str) -> None:
    assert _parse(traceparent) == parse_traceparent(traceparent)


def test_batch_span_context_and_model_spans() -> None:
    # The process's provider is the first WorkerTracing's (set once): which one is no matter.
    tracing = WorkerTracing()
    report = wpb.ExecuteSpan()
    first = format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0x1234, 1)
    tracer = trace.get_tracer("model")
    with (
        tracing.execute_span([first, "", first], report) as traces,
        tracer.start_as_current_span("model.work") as span,
    ):
        parent_span = span.parent  # type: ignore[attr-defined]
    assert traces[1] is None
    assert traces[0] is not None and traces[2] is not None
    context = json.loads(traces[0].get_context() or "")["traceparent"]
    assert context == format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, report.span_id, 1)
    assert parent_span.span_id == report.span_id and report.end_ns >= report.start_ns > 0
    assert trace.get_current_span() is trace.INVALID_SPAN  # the context is gone again


def test_unreadable_traceparents_leave_the_batch_untraced() -> None:
    report = wpb.ExecuteSpan()
    with ExecuteSpan(["not a traceparent"], report) as traces:
        assert trace.get_current_span() is trace.INVALID_SPAN
    assert traces == [None] and report.span_id == 0


def test_an_exception_is_reported_and_raised() -> None:
    report = wpb.ExecuteSpan()
    traceparent = format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0x1234, 1)
    with pytest.raises(ValueError, match="bad input"), ExecuteSpan([traceparent], report):
        raise ValueError("bad input")
    assert report.exception_type == "ValueError"
    assert report.exception_message == "bad input"
    assert "Traceback" in report.exception_stacktrace and report.span_id
