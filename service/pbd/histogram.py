"""A Prometheus histogram's state, counted since the daemon started, and its samples.

Buckets are upper bounds (``le``): an observation equal to a bound counts in that bucket.
The samples are what a Prometheus client writes for a histogram: a cumulative ``_bucket`` per
bound and ``+Inf``, then ``_count`` and ``_sum``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field


def bound_text(bound: float) -> str:
    """A bucket bound as Prometheus' C++ client prints it: ``1``, ``2.5``, ``+Inf``."""
    if bound == float("inf"):
        return "+Inf"
    text = repr(float(bound))
    return text[:-2] if text.endswith(".0") else text


@dataclass
class Histogram:
    bounds: Sequence[float]  # ascending, without +Inf
    counts: list[int] = field(init=False)  # per bucket, then +Inf (not cumulative)
    total: float = 0.0  # the sum of observations

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, values: Iterable[float]) -> None:
        for v in values:
            self.counts[bisect.bisect_left(self.bounds, v)] += 1
            self.total += v

    def samples(
        self, name: str, labels: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, str], float]]:
        """``(sample name, labels, value)`` for each sample of this histogram."""
        running = 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            running += count
            yield f"{name}_bucket", {**labels, "le": bound_text(bound)}, running
        yield f"{name}_count", labels, running
        yield f"{name}_sum", labels, self.total
