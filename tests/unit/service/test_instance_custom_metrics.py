"""Custom metrics end to end without a socket: the worker's channel feeds the daemon's registry,
whose families prometheus_client writes out.

Two channels over one registry stand for two instances of a model sharing a series.
"""

from __future__ import annotations

from pbd.instance.custom_metrics import CustomMetrics, WorkerMetrics
from pbd.metrics.server import exposition
from pbd_wire import worker_pb2 as wpb
from pbd_worker.metrics import MAX_PENDING, MetricsChannel


class Wire:
    """One worker's connection: what its channel sends goes straight to its daemon session."""

    def __init__(self, registry: CustomMetrics, owner: str) -> None:
        self.session: WorkerMetrics = registry.session(owner)
        self.channel = MetricsChannel(self.flush, self.ask)
        self.sent: list[wpb.MetricUpdates] = []

    def flush(self) -> None:
        updates = self.channel.take()
        if updates is not None:
            self.sent.append(updates)
            assert self.session.apply(updates) is None

    def ask(self, query: wpb.MetricUpdates) -> wpb.MetricReply:
        self.flush()
        reply = self.session.apply(query)
        assert reply is not None and reply.query == query.query
        return reply


def family(wire: Wire, name: str, kind: str, description: str = "d") -> int:
    fid = wire.channel.new_id()
    assert wire.channel.family_new(fid, name, description, kind) is None
    return fid


def metric(wire: Wire, fid: int, labels: dict[str, str], buckets: list[float] = ()) -> int:
    mid = wire.channel.new_id()
    wire.channel.metric_new(mid, fid, labels, list(buckets))
    return mid


def test_updates_fold_into_one_op_per_metric() -> None:
    wire = Wire(CustomMetrics(), "m/1/a")
    counter = metric(wire, family(wire, "requests", "COUNTER"), {"k": "v"})
    gauge = metric(wire, family(wire, "size", "GAUGE"), {})
    hist = metric(wire, family(wire, "sums", "HISTOGRAM"), {}, [1.0, 10.0])
    wire.flush()
    for _ in range(1000):
        wire.channel.increment(counter, 1.0)
    wire.channel.increment(gauge, 5)
    wire.channel.set(gauge, 2)
    wire.channel.increment(gauge, 0.5)  # folded into the set: set(2.5)
    for v in (0.5, 5, 50):
        wire.channel.observe(hist, v)
    updates = wire.channel.take()
    assert updates is not None
    assert [op.WhichOneof("op") for op in updates.ops] == ["increment", "set", "observe"]
    assert updates.ops[0].increment == 1000 and updates.ops[1].set == 2.5
    assert list(updates.ops[2].observe.values) == [0.5, 5, 50]
    wire.session.apply(updates)
    assert wire.channel.value(counter) == 1000 and wire.channel.value(gauge) == 2.5
    assert wire.channel.take() is None


def test_a_long_buffer_is_sent_without_waiting() -> None:
    wire = Wire(CustomMetrics(), "m/1/a")
    hist = metric(wire, family(wire, "sums", "HISTOGRAM"), {}, [1.0])
    wire.flush()
    for _ in range(MAX_PENDING + 10):
        wire.channel.observe(hist, 0.5)
    assert len(wire.sent) == 2  # the creation, then one full buffer
    wire.flush()
    text = exposition([wire.session.registry]).decode()
    assert f"sums_count {float(MAX_PENDING + 10)}" in text


def test_instances_share_a_series_and_release_it_when_gone() -> None:
    registry = CustomMetrics()
    a, b = Wire(registry, "m/1/a"), Wire(registry, "m/1/b")
    ma = metric(a, family(a, "requests", "COUNTER", "first"), {"model": "m"})
    mb = metric(b, family(b, "requests", "COUNTER", "second"), {"model": "m"})
    a.channel.increment(ma, 2)
    b.channel.increment(mb, 3)
    assert a.channel.value(ma) == 2  # b's update is still buffered in b
    b.flush()
    assert a.channel.value(ma) == 5 and b.channel.value(mb) == 5
    text = exposition([registry]).decode()
    assert "# HELP requests first\n# TYPE requests counter\n" in text  # the first description
    assert 'requests{model="m"} 5.0\n' in text
    a.session.close()  # instance a went away: b still holds the series
    assert 'requests{model="m"} 5.0\n' in exposition([registry]).decode()
    b.session.close()
    assert "requests" not in exposition([registry]).decode()


def test_a_name_taken_by_another_kind_is_refused() -> None:
    registry = CustomMetrics()
    a, b = Wire(registry, "m/1/a"), Wire(registry, "n/1/a")
    family(a, "taken", "COUNTER")
    error = b.channel.family_new(b.channel.new_id(), "taken", "d", "GAUGE")
    assert error is not None and "already exists with kind COUNTER" in error.message


def test_histogram_exposition_and_removal() -> None:
    registry = CustomMetrics()
    wire = Wire(registry, "m/1/a")
    fid = family(wire, "lat", "HISTOGRAM")
    mid = metric(wire, fid, {"op": "x"}, [0.1, 1.0, 2.5])
    for v in (0.05, 1.0, 6.0):  # 1.0 falls in le="1": bounds are inclusive
        wire.channel.observe(mid, v)
    wire.flush()
    text = exposition([registry]).decode()
    for le, count in (("0.1", 1), ("1", 2), ("2.5", 2), ("+Inf", 3)):
        assert f'lat_bucket{{le="{le}",op="x"}} {float(count)}\n' in text, le
    assert 'lat_count{op="x"} 3.0\n' in text and 'lat_sum{op="x"} 7.05\n' in text
    wire.channel.remove(mid)
    wire.channel.family_remove(fid)
    wire.flush()
    assert "lat" not in exposition([registry]).decode()
