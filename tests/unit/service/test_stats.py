"""The per model version counters: what the first-response histogram records, with which
buckets."""

from __future__ import annotations

import json

from pbd.stats import (
    FIRST_RESPONSE_BUCKETS_MS,
    FIRST_RESPONSE_FAMILY,
    ModelStats,
    first_response_buckets,
)


def _metrics(family: str, buckets: list[float]) -> dict[str, object]:
    control = {"metric_identifier": {"family": family}, "histogram_options": {"buckets": buckets}}
    return {"model_metrics": {"metric_control": [control]}}


def test_first_response_buckets_are_tritons_unless_the_model_sets_them() -> None:
    assert first_response_buckets({}) == FIRST_RESPONSE_BUCKETS_MS == (100, 500, 2000, 5000)
    assert first_response_buckets(_metrics(FIRST_RESPONSE_FAMILY, [8, 1, 4])) == (1, 4, 8)
    # Another family's options are not these.
    assert first_response_buckets(_metrics("nv_other", [1])) == FIRST_RESPONSE_BUCKETS_MS


def test_first_response_is_recorded_in_whole_milliseconds_with_the_models_buckets() -> None:
    stats = ModelStats()
    assert stats.first_response is None  # nothing recorded, nothing allocated
    config = _metrics(FIRST_RESPONSE_FAMILY, [1, 10])
    for ns in (999_999, 1_000_000, 10_500_000, 50_000_000):
        stats.responded_first(ns, config)
    assert stats.first_response is not None
    assert stats.first_response.counts == [2, 1, 1]  # 0 ms, 1 ms | 10 ms | 50 ms
    assert stats.first_response.total == 61


def test_a_record_adds_up_where_it_is_merged() -> None:
    """A front end's direct-path counters, as JSON, added to the daemon's: every counter."""
    theirs = ModelStats()
    theirs.executed(2, 10, 20, 30, batch_size=3, failed=(1, 1))
    theirs.success.add(100)
    theirs.queue.add(5)
    theirs.failed(7, "BACKEND")
    theirs.failed(9, "CANCELED")
    ours = ModelStats()
    ours.executed(1, 1, 2, 3)
    ours.success.add(50)
    ours.merge_record(json.loads(json.dumps(theirs.to_record())))
    assert (ours.success.count, ours.success.ns) == (2, 150)
    assert (ours.fail.count, ours.fail.ns) == (2, 16)
    assert (ours.queue.count, ours.queue.ns) == (1, 5)
    assert (ours.compute_infer.count, ours.compute_infer.ns) == (2, 22)
    assert (ours.execution_count, ours.inference_count) == (2, 3)
    assert sorted(ours.batches) == [1, 2]
    assert ours.batches[2].compute_output.ns == 30
    assert ours.failures == {"REJECTED": 0, "CANCELED": 1, "BACKEND": 1, "OTHER": 0}
    assert ours.last_inference_ms == max(ours.last_inference_ms, theirs.last_inference_ms) > 0


def test_the_parts_of_a_batch_a_worker_formed_count_one_execution() -> None:
    """Three front ends' requests in one execute (pbd_worker.front_batcher): each counts its own
    request; the part that carries the executed rows counts the execution, once."""
    whole = ModelStats()
    whole.executed_part(1, 10, 20, 30, 2, (0, 0), 0)
    whole.executed_part(1, 10, 20, 30, 1, (0, 0), 4)  # 2 + 1 + 1 rows ran
    whole.executed_part(1, 10, 20, 30, 1, (0, 0), 0)
    whole.executed_part(1, 10, 20, 30, 3, (1, 3), 0)  # failed: neither inference nor compute
    assert (whole.execution_count, whole.inference_count) == (1, 4)
    assert (whole.compute_infer.count, whole.compute_infer.ns) == (3, 20)
    assert sorted(whole.batches) == [4]
    assert whole.batches[4].compute_infer.count == 1
    # The same batch counted by one process as it executed it.
    alone = ModelStats()
    alone.executed(4, 10, 20, 30, batch_size=7, failed=(1, 3))
    assert (alone.execution_count, alone.inference_count) == (1, 4)
    assert (alone.compute_infer.count, alone.compute_infer.ns) == (3, 20)


def test_a_records_first_response_histogram_adds_up_under_the_same_buckets_only() -> None:
    """A front end's first responses (``--metrics-histogram-latencies`` on the direct path)
    join the daemon's; a record counted under other buckets (a reload changed them) fits
    none of these and is dropped."""
    config = _metrics(FIRST_RESPONSE_FAMILY, [1, 10])
    theirs, ours = ModelStats(), ModelStats()
    for ns in (0, 5_000_000, 20_000_000):
        theirs.responded_first(ns, config)
    ours.merge_record(json.loads(json.dumps(theirs.to_record())))  # none of ours yet
    assert ours.first_response is not None
    assert ours.first_response.counts == [1, 1, 1] and ours.first_response.total == 25
    ours.responded_first(2_000_000, config)
    ours.merge_record(json.loads(json.dumps(theirs.to_record())))
    assert ours.first_response.counts == [2, 3, 2] and ours.first_response.total == 52
    other = ModelStats()
    other.responded_first(0, _metrics(FIRST_RESPONSE_FAMILY, [3]))
    ours.merge_record(json.loads(json.dumps(other.to_record())))
    assert ours.first_response.counts == [2, 3, 2]
    # Without a histogram, a record carries none.
    assert "first_response" not in ModelStats().to_record()
