"""Models' own metrics (``pb_utils.MetricFamily``), held by the daemon for every worker.

Families are global by name; a series is one label set of a family, shared by every instance
that made a metric with those labels. Each worker has a :class:`WorkerMetrics` session that maps
the worker's ids to families and series and counts its references: a series lives while some
worker holds a metric on it, and everything a worker held is released when the worker goes
(so a restarted instance starts its metrics afresh, as Triton's stub does).

Arguments were checked by the worker; what is refused here is what only the daemon can know
(a family name another model took for another kind).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

from pbd.histogram import Histogram
from pbd_wire import worker_pb2 as wpb

log = logging.getLogger("pbd.metrics")
LabelKey = tuple[tuple[str, str], ...]


@dataclass
class Series:
    labels: dict[str, str]
    histogram: Histogram | None = None  # histograms
    value: float = 0.0  # counter, gauge
    refs: int = 0


@dataclass
class Family:
    name: str
    description: str
    kind: str  # "COUNTER" | "GAUGE" | "HISTOGRAM"
    series: dict[LabelKey, Series] = field(default_factory=dict)
    refs: int = 0


class CustomMetrics:
    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def session(self, owner: str) -> WorkerMetrics:
        return WorkerMetrics(self, owner)

    def collect(self) -> Iterator[Metric]:
        for family in self.families.values():
            kind = family.kind.lower()
            metric = Metric(family.name, family.description, kind)
            for series in family.series.values():
                if series.histogram is None:
                    metric.add_sample(family.name, series.labels, series.value)
                    continue
                for sample in series.histogram.samples(family.name, series.labels):
                    metric.add_sample(*sample)
            yield metric

    def _drop_family(self, family: Family) -> None:
        family.refs -= 1
        if family.refs <= 0 and not family.series:
            self.families.pop(family.name, None)


class WorkerMetrics:
    """One worker's view: its ids, and the references they hold."""

    def __init__(self, registry: CustomMetrics, owner: str) -> None:
        self.registry = registry
        self.owner = owner
        self.families: dict[int, Family] = {}
        self.metrics: dict[int, tuple[Family, LabelKey]] = {}

    def apply(self, updates: wpb.MetricUpdates) -> wpb.MetricReply | None:
        """Apply the ops in order; the reply when the worker asked for one."""
        error = ""
        for op in updates.ops:
            try:
                self._apply(op)
                error = ""
            except (KeyError, ValueError) as exc:
                error = str(exc.args[0] if exc.args else exc)
                log.debug("%s: metric op refused: %s", self.owner, error)
        if not updates.query:
            if error:
                log.warning("%s: custom metric update refused: %s", self.owner, error)
            return None
        reply = wpb.MetricReply(query=updates.query)
        if error:
            reply.error.CopyFrom(wpb.Error(code="INVALID_ARG", message=error))
        elif updates.value_of:
            reply.value = self._series(updates.value_of).value
        return reply

    def _series(self, metric: int) -> Series:
        family, key = self.metrics[metric]
        return family.series[key]

    def _apply(self, op: wpb.MetricOp) -> None:
        which = op.WhichOneof("op")
        if which == "increment":
            self._series(op.id).value += op.increment
        elif which == "set":
            self._series(op.id).value = op.set
        elif which == "observe":
            histogram = self._series(op.id).histogram
            if histogram is None:
                raise ValueError("observe() is for histograms only")
            histogram.observe(op.observe.values)
        elif which == "family_new":
            self._family_new(op.id, op.family_new)
        elif which == "metric_new":
            self._metric_new(op.id, op.metric_new)
        elif which == "remove":
            self._remove(op.id)
        elif which == "family_remove":
            family = self.families.pop(op.id, None)
            if family is not None:
                self.registry._drop_family(family)

    def _family_new(self, family_id: int, new: wpb.MetricFamilyNew) -> None:
        if new.kind not in ("COUNTER", "GAUGE", "HISTOGRAM"):
            raise ValueError(f"unknown metric kind '{new.kind}'")
        family = self.registry.families.get(new.name)
        if family is None:
            family = Family(new.name, new.description, new.kind)
            self.registry.families[new.name] = family
        elif family.kind != new.kind:
            raise ValueError(
                f"metric family '{new.name}' already exists with kind {family.kind}, not {new.kind}"
            )
        family.refs += 1
        self.families[family_id] = family

    def _metric_new(self, metric_id: int, new: wpb.MetricNew) -> None:
        family = self.families[new.family]
        labels = dict(new.labels)
        key: LabelKey = tuple(sorted(labels.items()))
        series = family.series.get(key)
        if series is None:  # the first one to make a series picks its buckets
            histogram = Histogram(list(new.buckets)) if family.kind == "HISTOGRAM" else None
            series = Series(labels, histogram)
            family.series[key] = series
        series.refs += 1
        self.metrics[metric_id] = (family, key)

    def _remove(self, metric_id: int) -> None:
        held = self.metrics.pop(metric_id, None)
        if held is None:
            return
        family, key = held
        series = family.series.get(key)
        if series is not None:
            series.refs -= 1
            if series.refs <= 0:
                del family.series[key]
        if family.refs <= 0 and not family.series:
            self.registry.families.pop(family.name, None)

    def close(self) -> None:
        """The worker is gone: release every family and series it held."""
        for metric_id in list(self.metrics):
            self._remove(metric_id)
        for family in self.families.values():
            self.registry._drop_family(family)
        self.families.clear()
