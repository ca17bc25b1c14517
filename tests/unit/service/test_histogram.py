"""A histogram's buckets, counts and samples, as a Prometheus client writes them."""

from __future__ import annotations

from pbd.histogram import Histogram, bound_text


def test_bound_text_reads_as_prometheus_cpp_writes_it() -> None:
    assert [bound_text(b) for b in (0.1, 1.0, 2.5, 10.0, 1e21, float("inf"))] == [
        "0.1",
        "1",
        "2.5",
        "10",
        "1e+21",
        "+Inf",
    ]


def test_a_value_equal_to_a_bound_counts_in_that_bucket() -> None:
    histogram = Histogram((1.0, 5.0))
    histogram.observe([0, 1, 1.5, 5, 7])
    assert histogram.counts == [2, 2, 1]
    assert histogram.total == 14.5


def test_samples_are_cumulative_then_count_and_sum() -> None:
    histogram = Histogram((100.0, 500.0))
    histogram.observe([3, 250, 9000])
    labels = {"model": "m"}
    assert list(histogram.samples("h", labels)) == [
        ("h_bucket", {"model": "m", "le": "100"}, 1),
        ("h_bucket", {"model": "m", "le": "500"}, 2),
        ("h_bucket", {"model": "m", "le": "+Inf"}, 3),
        ("h_count", {"model": "m"}, 3),
        ("h_sum", {"model": "m"}, 9253),
    ]
