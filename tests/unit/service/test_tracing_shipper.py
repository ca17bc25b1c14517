"""The exporter-process hand-off: what crosses the pipe rebuilds the same spans, a full queue
drops instead of blocking, and shutdown leaves no process behind."""

from __future__ import annotations

import marshal
import time
from typing import Any

from pbd.tracing.encode import encode_record
from pbd.tracing.export_process import from_wire
from pbd.tracing.provider import Tracing
from pbd.tracing.records import RECORD_FIELDS, EncodedSpans, WorkerSpans, expand
from pbd.tracing.request import RequestTrace
from pbd.tracing.settings import TraceSettings, parse_trace_config
from pbd.tracing.shipper import ProcessSpanProcessor, to_wire

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Keep:
    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    def emit(self, record: tuple[Any, ...]) -> None:
        self.records.append(record)


def _record(traceparent: str | None) -> tuple[Any, ...]:
    tracing = Tracing(TraceSettings(parse_trace_config([])), None)
    tracing.sampler = object()  # type: ignore[assignment] # decide() is replaced below
    tracing.decide = lambda *a: (True, {"sampler.says": "yes"})  # type: ignore[method-assign]
    keep = _Keep()
    trace = RequestTrace(
        tracing, method="ModelInfer", model="m", version="2", traceparent=traceparent,
        start_ns=time.time_ns(),
    )  # fmt: skip
    trace.tracing = keep  # type: ignore[assignment]
    trace.queued()
    trace.dispatched("m_0", 1, 1)
    trace.input_copied(time.time_ns(), time.time_ns())
    trace.computed(1000, 2000, error="bad")
    trace.responded(time.time_ns())
    trace.finish(13, "bad")
    return keep.records[0]


def test_records_cross_the_pipe_unchanged() -> None:
    for traceparent in (None, PARENT):
        record = _record(traceparent)
        assert len(record) == len(RECORD_FIELDS)
        crossed = marshal.loads(marshal.dumps([to_wire(record)]))[0]
        assert crossed == record
        back = from_wire(crossed)
        assert isinstance(back, EncodedSpans)
        assert (back.spans, back.count) == encode_record(record)
        here = expand(record)
        assert [s.name for s in here.spans] == [
            "queue", "input_copy", "compute", "response",
            "inference.GRPCInferenceService/ModelInfer",
        ]  # fmt: skip
        ids = {s.span_id for s in here.spans}
        assert len(ids) == len(here.spans) and 0 not in ids
        assert here.spans[-1].attributes["sampler.says"] == "yes"
        assert (here.parent is not None) is (traceparent is not None)
    spans = from_wire(marshal.loads(marshal.dumps([to_wire(WorkerSpans(b"\x01\x02"))]))[0])
    assert isinstance(spans, WorkerSpans) and spans.otlp == b"\x01\x02"


def test_full_queue_drops_and_shutdown_reaps_the_exporter() -> None:
    # An endpoint nobody listens on: the exporter process retries, the daemon side never waits.
    # The shipper sleeps (long interval, batch never full) while the queue overfills.
    processor = ProcessSpanProcessor(
        {"url": ["http://127.0.0.1:9"]}, max_queue_size=4, max_batch=100, ship_interval=600
    )
    assert processor._process is None  # nothing traced yet: no exporter process
    for _ in range(10):
        processor.on_end(WorkerSpans(b""))
    assert processor.dropped == 6
    processor.shutdown()  # ships the four it kept: that starts the exporter, then reaps it
    process = processor._process
    assert process is not None and process.poll() is not None


def test_an_idle_shipper_waits_without_a_timer_and_the_first_span_wakes_it() -> None:
    """Nothing queued: the shipping thread waits with no timeout (an idle daemon does not
    wake twenty times a second for it); a span that finds it so wakes it, and it ships."""

    class Recording(ProcessSpanProcessor):
        def _ship(self, batch: list[Any]) -> None:  # what would go to the exporter process
            self.shipped.append(batch)

    processor = Recording({"url": ["http://127.0.0.1:9"]}, max_batch=100, ship_interval=0.01)
    processor.shipped = []  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 5
        while not processor._idle:
            assert time.monotonic() < deadline, "the shipper never parked"
            time.sleep(0.005)
        processor.on_end(WorkerSpans(b""))
        while not processor.shipped:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the first span was not shipped"
            time.sleep(0.005)
    finally:
        processor.shutdown()
    assert len(processor.shipped[0]) == 1  # type: ignore[attr-defined]
