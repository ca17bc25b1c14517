"""The response cache's metric families, with Triton's names and help texts.

Per model version (only those whose config enables the cache, as Triton lists them, with or
without a cache on the server): hits, misses and their durations, from the statistics
counters; Triton counts them among its latency counters, so ``--metrics-config
counter_latencies=false`` (``--metrics-counter-latencies=false``) drops all four. Cache-wide
gauges, only when the daemon has a cache: its fill, entries, lookups, hits, misses, evictions
and the time spent looking up and inserting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from pbd.cache.response_cache import ResponseCache
    from pbd.stats import ModelStats
    from pbd.version.runtime import VersionRuntime

_US = 1000  # ns per µs

_PER_MODEL: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit.ns // _US,
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda s: s.cache_miss.count,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda s: s.cache_miss.ns // _US,
    ),
)

_CACHE_WIDE: tuple[tuple[str, str, Callable[[ResponseCache], float]], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]", lambda c: c.utilization),
    (
        "nv_cache_num_entries",
        "Number of responses stored in response cache",
        lambda c: len(c.store),
    ),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda c: c.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda c: c.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda c: c.lookups),
    (
        "nv_cache_num_evictions",
        "Number of cache evictions in response cache",
        lambda c: c.store.evictions,
    ),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        lambda c: c.lookup_ns // _US,
    ),
    (
        "nv_cache_insertion_duration",
        "Total cache insertion duration, in microseconds",
        lambda c: c.insertion_ns // _US,
    ),
)


def cache_families(
    runtimes: Iterable[tuple[dict[str, str], VersionRuntime]],
    cache: ResponseCache | None,
    per_model: bool = True,
) -> Iterator[Metric]:
    """``per_model``: the latency counters are exported (Triton's counter_latencies)."""
    caching = [(labels, rt) for labels, rt in runtimes if per_model and rt.config.response_cache]
    if caching:
        for name, help_text, read in _PER_MODEL:
            family = Metric(name, help_text, "counter")
            for labels, runtime in caching:
                family.add_sample(name, labels, read(runtime.stats))
            yield family
    if cache is not None:
        for name, help_text, read_cache in _CACHE_WIDE:
            family = Metric(name, help_text, "gauge")
            family.add_sample(name, {}, read_cache(cache))
            yield family
