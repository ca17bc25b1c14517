"""``pb_utils.MetricFamily`` and ``Metric``: a model's own metrics, exposed by the daemon on
its Prometheus endpoint beside pbd's.

Semantics are Triton's: a family is created once per name (a second family of the same name
and kind shares the first, keeping its description; another kind is an error); metrics of one
family with the same labels are one series, shared by every instance of every model; counters
only go up, ``set`` is for gauges, ``observe`` for histograms, ``value`` for counters and gauges.
A family keeps its metrics alive; once it is gone its metrics refuse every operation.

Argument errors are found here, at once, and raise ``TritonModelException``; updates are then
buffered by the worker runtime (see ``pbd_worker.metrics``) rather than sent one by one.
"""

from __future__ import annotations

import contextlib
import math
import re
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from pbd_worker.model_api import state
from pbd_worker.model_api.errors import TritonModelException

if TYPE_CHECKING:
    from pbd_worker.metrics import MetricsChannel

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# pbd's own metrics: a model may not define families under these prefixes.
RESERVED_PREFIXES = ("nv_", "pbd_")

_CLEARED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


class MetricKind(IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_TRITON_KIND = {
    MetricKind.COUNTER: "TRITONSERVER_METRIC_KIND_COUNTER",
    MetricKind.GAUGE: "TRITONSERVER_METRIC_KIND_GAUGE",
    MetricKind.HISTOGRAM: "TRITONSERVER_METRIC_KIND_HISTOGRAM",
}


def _channel() -> MetricsChannel:
    channel = state.metrics_channel
    if channel is None:
        raise TritonModelException("custom metrics are available only inside a pbd worker")
    return channel


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # noqa: UP038
        raise TypeError(f"{what}(): value must be a number, got {type(value).__name__}")
    return float(value)


class Metric:
    """One series of a family (one label set). Made by ``MetricFamily.Metric(...)``."""

    _kind: MetricKind
    _id: int
    _channel: MetricsChannel
    _cleared: bool
    # Checked on every update: plain attributes, not enum lookups (this is the hot path).
    _counter: bool
    _gauge: bool
    _histogram: bool

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise TypeError("Metric objects are made by MetricFamily.Metric(labels, buckets)")

    @classmethod
    def _make(cls, family: MetricFamily, labels: dict[str, str], buckets: list[float]) -> Metric:
        metric = object.__new__(cls)
        metric._kind = kind = family._kind
        metric._id = family._channel.new_id()
        metric._channel = family._channel
        metric._cleared = False
        metric._counter = kind is MetricKind.COUNTER
        metric._gauge = kind is MetricKind.GAUGE
        metric._histogram = kind is MetricKind.HISTOGRAM
        metric._channel.metric_new(metric._id, family._id, labels, buckets)
        return metric

    def _refuse(self, operation: str, prefix: str) -> None:
        if self._cleared:
            raise TritonModelException(f"{prefix}{_CLEARED}")
        raise TritonModelException(
            f"{prefix}{_TRITON_KIND[self._kind]} does not support {operation}"
        )

    def increment(self, value: float) -> None:
        if type(value) is not float:
            value = _number(value, "increment")
        if self._cleared or self._histogram:
            self._refuse("Increment", "Failed to increment metric value: ")
        if value < 0 and self._counter:
            raise TritonModelException(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
                "be incremented monotonically by non-negative values."
            )
        self._channel.increment(self._id, value)

    def set(self, value: float) -> None:
        if type(value) is not float:
            value = _number(value, "set")
        if self._cleared or not self._gauge:
            self._refuse("Set", "Failed to set metric value: ")
        self._channel.set(self._id, value)

    def observe(self, value: float) -> None:
        if type(value) is not float:
            value = _number(value, "observe")
        if self._cleared or not self._histogram:
            self._refuse("Observe", "Failed to observe metric value: ")
        self._channel.observe(self._id, value)

    def value(self) -> float:
        prefix = "Failed to get metric value: "
        if self._cleared or self._histogram:
            self._refuse("Value", prefix)
        try:
            return self._channel.value(self._id)
        except RuntimeError as exc:
            raise TritonModelException(f"{prefix}{exc}") from None

    def _clear(self) -> None:
        if not self._cleared:
            self._cleared = True
            with contextlib.suppress(Exception):  # at interpreter exit the worker may be gone
                self._channel.remove(self._id)


class MetricFamily:
    """``MetricFamily(name, description, kind)``, kind one of ``MetricFamily.COUNTER``,
    ``GAUGE``, ``HISTOGRAM``."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self._id = 0
        self._metrics: list[Metric] = []
        prefix = "Error when creating MetricFamily: "
        for arg, value in (("name", name), ("description", description)):
            if not isinstance(value, str):
                raise TypeError(f"MetricFamily(): {arg} must be a str, got {type(value).__name__}")
        if isinstance(kind, bool) or not isinstance(kind, int) or kind not in list(MetricKind):
            raise TritonModelException(f"{prefix}Unknown metric kind {kind!r}")
        if not _NAME.match(name):
            raise TritonModelException(f"{prefix}Invalid metric name '{name}'")
        if name.startswith(RESERVED_PREFIXES):
            raise TritonModelException(
                f"{prefix}metric family names starting with "
                f"{' or '.join(repr(p) for p in RESERVED_PREFIXES)} are reserved for the server"
            )
        self._name = name
        self._kind = MetricKind(kind)
        self._channel = _channel()
        family_id = self._channel.new_id()
        error = self._channel.family_new(family_id, name, description, self._kind.name)
        if error is not None:
            raise TritonModelException(f"{prefix}{error.message}")
        self._id = family_id

    def Metric(  # noqa: N802 - Triton's name
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        prefix = "Failed to create metric. "
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException(f"{prefix}Labels must be a dictionary.")
        for key, value in labels.items():
            if not isinstance(key, str) or not _LABEL.match(key) or key.startswith("__"):
                raise TritonModelException(f"{prefix}Invalid label name {key!r}.")
            if not isinstance(value, str):
                raise TritonModelException(
                    f"{prefix}The value of label '{key}' must be a string, "
                    f"got {type(value).__name__}."
                )
        bounds: list[float] = []
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException(f"{prefix}Buckets must be a list.")
            if self._kind is not MetricKind.HISTOGRAM:
                raise TritonModelException(f"{prefix}Unexpected buckets found.")
            try:
                bounds = [_number(b, "Metric") for b in buckets]
            except TypeError:
                raise TritonModelException(f"{prefix}Buckets must be numbers.") from None
            if any(math.isnan(b) for b in bounds) or any(
                b >= c for b, c in zip(bounds, bounds[1:], strict=False)
            ):
                raise TritonModelException(
                    f"{prefix}Bucket boundaries must be strictly increasing."
                )
        elif self._kind is MetricKind.HISTOGRAM:
            raise TritonModelException(f"{prefix}Missing required buckets.")
        if "le" in labels and self._kind is MetricKind.HISTOGRAM:
            raise TritonModelException(f"{prefix}Label 'le' is reserved for histograms.")
        metric = Metric._make(self, dict(labels), bounds)
        self._metrics.append(metric)
        return metric

    def __del__(self) -> None:
        if not getattr(self, "_id", 0):
            return
        for metric in self._metrics:
            metric._clear()
        self._metrics.clear()
        with contextlib.suppress(Exception):
            self._channel.family_remove(self._id)
