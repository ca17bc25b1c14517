"""The per model version counters: what the first-response histogram records, with which
buckets."""

from __future__ import annotations

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
