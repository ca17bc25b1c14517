"""Per model version counters for the statistics extension, as Triton reports them.

``success``/``fail``: whole request, from the dataplane taking it to the result being ready;
``queue``: waiting for an instance; ``compute_input``: copying inputs into shared memory and
the worker building the model's requests; ``compute_infer``: ``execute()``; ``compute_output``:
the worker writing outputs; ``cache_hit``: requests the response cache answered (looking them up
and building the answer); ``cache_miss``: requests it did not, which ran and were put in it
(looking up and inserting). All cumulative nanoseconds with counts; those of a request count
once per request. ``inference_count`` counts batch elements (a request of batch 4 is 4
inferences); ``batches`` (Triton's ``batch_stats``) counts executions per batch size.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pbd.errors import Code, PbdError
from pbd.histogram import Histogram

# Time to first response (Triton's metric, served under --metrics-config
# histogram_latencies=true): its family name and default buckets, in milliseconds.
FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
_NS_PER_MS = 1_000_000

# Triton's FailureReason values. REJECTED: refused by the queue (full, timed out, over
# --max-queued-bytes); CANCELED: the client cancelled; BACKEND: the model or its instance
# failed it; OTHER: anything else (refused at shutdown).
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def failure_reason(error: PbdError) -> str:
    """Why a request that reached a model version's queue failed, in Triton's words."""
    if error.code is Code.CANCELLED:
        return "CANCELED"
    return error.failure or "BACKEND"


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        if ns > 0:
            self.ns += ns


@dataclass
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batches: dict[int, BatchStats] = field(default_factory=dict)
    # Failed requests by Triton's failure reason (the ``reason`` label of
    # nv_inference_request_failure); ``fail`` holds their total and durations.
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    # Milliseconds from the dataplane taking a request to its first response (with outputs
    # or an error), every request of every model, as Triton counts it.
    first_response: Histogram | None = None

    def responded_first(self, ns: int, config: Mapping[str, Any]) -> None:
        """A request's first response came ``ns`` after it was taken (``config``: the model's
        config, JSON form, which may set the buckets)."""
        if self.first_response is None:
            self.first_response = Histogram(first_response_buckets(config))
        # Whole milliseconds, as Triton observes them.
        self.first_response.observe((ns // _NS_PER_MS,))

    def failed(self, ns: int, reason: str) -> None:
        self.fail.add(ns)
        self.failures[reason] += 1

    def answered_from_cache(self, request_ns: int, queue_ns: int, hit_ns: int) -> None:
        """A request the response cache answered: a success that waited ``queue_ns`` and was
        no inference (as Triton counts it: no execution, no last inference time)."""
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.cache_hit.add(hit_ns)

    def missed_cache(self, miss_ns: int) -> None:
        """A request that ran and went into the cache: its lookup and insertion (``miss_ns``)
        count in its duration too, as Triton adds them after the model has counted it."""
        self.success.ns += miss_ns
        self.cache_miss.add(miss_ns)

    def to_record(self) -> dict[str, Any]:
        """The counters as JSON-ready data (a front end's direct-path statistics, reported to
        the daemon: ``merge_record``), the first-response histogram with them when there is
        one (``--metrics-config histogram_latencies=true``)."""
        durations = {name: [d.count, d.ns] for name, d in self._durations().items()}
        record: dict[str, Any] = {
            "durations": durations,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "last_inference_ms": self.last_inference_ms,
            "batches": {
                str(size): [[d.count, d.ns] for d in _batch_durations(b)]
                for size, b in self.batches.items()
            },
            "failures": dict(self.failures),
        }
        histogram = self.first_response
        if histogram is not None:
            record["first_response"] = [list(histogram.bounds), histogram.counts, histogram.total]
        return record

    def merge_record(self, record: Mapping[str, Any]) -> None:
        """Add the counters of ``record`` (``to_record``) to these."""
        own = self._durations()
        for name, (count, ns) in record["durations"].items():
            own[name].add(int(ns), int(count))
        self.inference_count += int(record["inference_count"])
        self.execution_count += int(record["execution_count"])
        self.last_inference_ms = max(self.last_inference_ms, int(record["last_inference_ms"]))
        for size, durations in record["batches"].items():
            per_size = self.batches.setdefault(int(size), BatchStats())
            for mine, (count, ns) in zip(_batch_durations(per_size), durations, strict=True):
                mine.add(int(ns), int(count))
        for reason, count in record["failures"].items():
            if reason in self.failures:
                self.failures[reason] += int(count)
        first = record.get("first_response")
        if first is not None:
            self._merge_first_response([float(b) for b in first[0]], first[1], float(first[2]))

    def _merge_first_response(self, bounds: list[float], counts: list[int], total: float) -> None:
        """Add another process's first-response histogram. Its buckets are the model's, as
        these are; one counted under other buckets (the model was reloaded with new ones
        meanwhile) is dropped: its counts fit none of these."""
        if self.first_response is None:
            self.first_response = Histogram(bounds)
        mine = self.first_response
        if list(mine.bounds) != bounds or len(counts) != len(mine.counts):
            return
        for index, count in enumerate(counts):
            mine.counts[index] += int(count)
        mine.total += total

    def _durations(self) -> dict[str, Duration]:
        return {
            "success": self.success,
            "fail": self.fail,
            "queue": self.queue,
            "compute_input": self.compute_input,
            "compute_infer": self.compute_infer,
            "compute_output": self.compute_output,
            "cache_hit": self.cache_hit,
            "cache_miss": self.cache_miss,
        }

    def executed(
        self,
        requests: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        batch_size: int = 0,
        failed: tuple[int, int] = (0, 0),
    ) -> None:
        """One execute of ``requests`` requests whose batch dimensions sum to ``batch_size``
        (0: one per request), of which ``failed`` (requests, batch rows) failed. As in
        Triton, only successful requests count as inferences and carry compute durations,
        and an execute that failed every request is no execution."""
        batch_size = batch_size or requests
        failed_requests, failed_rows = failed
        requests -= failed_requests
        if requests <= 0:
            return
        batch_size -= failed_rows
        self.execution_count += 1
        self.inference_count += batch_size
        per_size = self.batches.setdefault(batch_size, BatchStats())
        per_size.compute_input.add(input_ns)
        per_size.compute_infer.add(infer_ns)
        per_size.compute_output.add(output_ns)
        self.compute_input.add(input_ns, requests)
        self.compute_infer.add(infer_ns, requests)
        self.compute_output.add(output_ns, requests)
        self.last_inference_ms = time.time_ns() // 1_000_000


    def executed_part(
        self,
        requests: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        batch_size: int,
        failed: tuple[int, int],
        execution_rows: int,
    ) -> None:
        """Part of an execute whose other parts another process counts (a batch a worker
        formed from several front ends' requests): ``requests`` requests of ``batch_size``
        rows, ``failed`` of them failed, as ``executed`` takes them; the part that counts the
        execution itself also gives the rows the whole execute ran without failing
        (``execution_rows``; 0 on the other parts)."""
        failed_requests, failed_rows = failed
        requests -= failed_requests
        if requests > 0:
            # The batch's durations once (as ``executed`` adds them), with the counting part.
            once = 1 if execution_rows > 0 else 0
            self.inference_count += batch_size - failed_rows
            self.compute_input.add(input_ns * once, requests)
            self.compute_infer.add(infer_ns * once, requests)
            self.compute_output.add(output_ns * once, requests)
            self.last_inference_ms = time.time_ns() // 1_000_000
        if execution_rows > 0:
            self.execution_count += 1
            per_size = self.batches.setdefault(execution_rows, BatchStats())
            per_size.compute_input.add(input_ns)
            per_size.compute_infer.add(infer_ns)
            per_size.compute_output.add(output_ns)


def _batch_durations(stats: BatchStats) -> tuple[Duration, Duration, Duration]:
    return stats.compute_input, stats.compute_infer, stats.compute_output


def first_response_buckets(config: Mapping[str, Any]) -> tuple[float, ...]:
    """The buckets of the first-response histogram for a model (its config's JSON form):
    ``model_metrics { metric_control { metric_identifier { family: "<FIRST_RESPONSE_FAMILY>" }
    histogram_options { buckets: [...] } } }``, else Triton's defaults."""
    for control in config.get("model_metrics", {}).get("metric_control", []):
        if control.get("metric_identifier", {}).get("family") != FIRST_RESPONSE_FAMILY:
            continue
        buckets = control.get("histogram_options", {}).get("buckets", [])
        if buckets:
            return tuple(sorted(float(b) for b in buckets))
    return FIRST_RESPONSE_BUCKETS_MS
