"""pbd's own metrics, read at scrape time from what the request path already counts.

Nothing is counted here: the statistics extension's counters (:mod:`pbd.stats`) are the source
of the ``nv_inference_*`` families (Triton's names, help texts and ``model``/``version`` labels),
the supervisor's slots give the instance counts, the arenas their sizes. Triton's durations are
microseconds; ``nv_inference_request_duration_us`` covers successful requests, as Triton's does.
Failures carry Triton's ``reason`` label; only successful requests count as inferences.
With ``--metrics-histogram-latencies`` (Triton's ``--metrics-config histogram_latencies=true``)
the time to first response is a histogram per model version, as in Triton 2.52 and later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from pbd.histogram import Histogram
from pbd.instance.records import State
from pbd.metrics.cache import cache_families
from pbd.stats import FIRST_RESPONSE_FAMILY, first_response_buckets

if TYPE_CHECKING:
    from pbd.dataplane import DataPlane
    from pbd.stats import ModelStats
    from pbd.version.runtime import VersionRuntime

_US = 1000  # ns per µs
# Labelled by Triton's failure reason besides model and version (pbd.stats.FAILURE_REASONS).
_FAILURE = "nv_inference_request_failure"
_LATENCY = "_duration_us"  # the latency counters' suffix

# (name, help, value from the counters) for the per model version counters.
_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: s.success.ns // _US,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda s: s.queue.ns // _US,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.compute_input.ns // _US,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.compute_infer.ns // _US,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
        lambda s: s.compute_output.ns // _US,
    ),
)


def _family(name: str, help_text: str, kind: str) -> Metric:
    return Metric(name, help_text, kind)


class PbdCollector:
    """A prometheus_client collector over the daemon's live state."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dp = dataplane

    def _runtimes(self) -> Iterable[tuple[dict[str, str], VersionRuntime]]:
        entries = self.dp.repository.entries
        for name in sorted(entries):
            for version, runtime in sorted(entries[name].versions.items()):
                yield {"model": name, "version": str(version)}, runtime

    def collect(self) -> Iterator[Metric]:
        runtimes = list(self._runtimes())
        latencies = self.dp.settings.metrics_counter_latencies
        for name, help_text, read in _COUNTERS:
            if not latencies and name.endswith(_LATENCY):
                continue  # --metrics-config counter_latencies=false, as Triton
            family = _family(name, help_text, "counter")
            for labels, runtime in runtimes:
                family.add_sample(name, labels, read(runtime.stats))
            yield family
        yield from cache_families(runtimes, self.dp.cache, per_model=latencies)
        failure = _family(
            _FAILURE, "Number of failed inference requests, all batch sizes", "counter"
        )
        for labels, runtime in runtimes:
            for reason, count in runtime.stats.failures.items():
                failure.add_sample(_FAILURE, {**labels, "reason": reason}, count)
        yield failure
        if self.dp.settings.metrics_histogram_latencies:
            yield self._first_response(runtimes)
        yield from self._instances(runtimes)
        yield from self._memory(runtimes)
        inflight = _family("pbd_inflight_requests", "Requests the daemon is serving now", "gauge")
        inflight.add_sample("pbd_inflight_requests", {}, self.dp.requests_inflight())
        yield inflight

    def _first_response(self, runtimes: list[tuple[dict[str, str], VersionRuntime]]) -> Metric:
        family = _family(
            FIRST_RESPONSE_FAMILY,
            "Duration from request to first response in milliseconds",
            "histogram",
        )
        for labels, runtime in runtimes:
            histogram = runtime.stats.first_response
            if histogram is None:  # no request yet: Triton shows the empty histogram
                histogram = Histogram(first_response_buckets(runtime.config.as_dict))
            for sample in histogram.samples(FIRST_RESPONSE_FAMILY, labels):
                family.add_sample(*sample)
        return family

    def _instances(self, runtimes: list[tuple[dict[str, str], VersionRuntime]]) -> Iterator[Metric]:
        pending = _family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        count = _family("pbd_model_instances", "Instances of a model version", "gauge")
        ready = _family(
            "pbd_model_instances_ready", "Instances of a model version ready for requests", "gauge"
        )
        restarts = _family(
            "pbd_model_instance_restarts", "Restarts of crashed instances", "counter"
        )
        model_ready = _family(
            "pbd_model_ready", "1 if the model version takes requests, else 0", "gauge"
        )
        for labels, rt in runtimes:
            pending.add_sample(pending.name, labels, self.dp.pending(rt))
            count.add_sample(count.name, labels, len(rt.slots))
            alive = sum(1 for s in rt.slots if s.instance.state is State.READY)
            ready.add_sample(ready.name, labels, alive)
            restarts.add_sample(restarts.name, labels, sum(s.restarts for s in rt.slots))
            model_ready.add_sample(model_ready.name, labels, 1 if rt.ready else 0)
        yield from (pending, count, ready, restarts, model_ready)

    def _memory(self, runtimes: list[tuple[dict[str, str], VersionRuntime]]) -> Iterator[Metric]:
        arena = _family(
            "pbd_shm_arena_bytes",
            "Shared memory of an instance's arenas: side=daemon holds request inputs, "
            "side=worker the outputs (as far as the daemon has mapped them)",
            "gauge",
        )
        used = _family(
            "pbd_shm_arena_used_bytes",
            "Bytes of the daemon-side arena allocated to requests in flight",
            "gauge",
        )
        for labels, rt in runtimes:
            for slot in rt.slots:
                memory = slot.instance.memory
                where = {**labels, "instance": slot.plan.name}
                arena.add_sample(arena.name, {**where, "side": "daemon"}, memory.arena.capacity)
                worker = sum(s.size for s in memory.worker_segments.segments.values())
                arena.add_sample(arena.name, {**where, "side": "worker"}, worker)
                used.add_sample(used.name, where, memory.arena.used)
        yield arena
        yield used
        regions = _family(
            "pbd_client_shm_regions", "System shared-memory regions clients registered", "gauge"
        )
        region_bytes = _family(
            "pbd_client_shm_bytes", "Bytes of the registered client regions", "gauge"
        )
        registered = self.dp.shm.system_regions()
        regions.add_sample(regions.name, {}, len(registered))
        region_bytes.add_sample(region_bytes.name, {}, sum(r.byte_size for r in registered))
        yield regions
        yield region_bytes
        cuda = self.dp.shm.cuda_regions()
        cuda_regions = _family(
            "pbd_client_cuda_shm_regions", "CUDA shared-memory regions clients registered", "gauge"
        )
        cuda_bytes = _family(
            "pbd_client_cuda_shm_bytes", "Bytes of the registered client CUDA regions", "gauge"
        )
        cuda_regions.add_sample(cuda_regions.name, {}, len(cuda))
        cuda_bytes.add_sample(cuda_bytes.name, {}, sum(r.byte_size for r in cuda))
        yield cuda_regions
        yield cuda_bytes
