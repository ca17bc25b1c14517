"""The Prometheus endpoint: pbd's counters equal the traffic sent, a model's own metrics appear
with their labels, and ``--allow-metrics false`` leaves no listener.

Scraped over real HTTP and read with prometheus_client's own text parser, as a scraper would.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import numpy as np
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
)
from prometheus_client.parser import text_string_to_metric_families

GOOD, BAD = 7, 3
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> tuple[str, Samples]:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # The parser reads a counter as OpenMetrics names it (<name>_total): it took the
            # TYPE line for the samples' own. Key it by the name on the wire.
            name = family.name if family.type == "counter" else s.name
            samples[(name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def labels(**kv: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kv.items()))


def test_counters_equal_the_traffic(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    daemon = start_daemon(repo, settle=["add_sub"])
    client = daemon.client()
    a = np.arange(4, dtype=np.float32)
    for _ in range(GOOD):
        client.infer(
            "add_sub", [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
        )
    for _ in range(BAD):  # wrong shape: refused before the model, no failure (as in Triton)
        error_of(lambda: client.infer("add_sub", [infer_input("INPUT0", a[:3], "FP32"),
                                                  infer_input("INPUT1", a, "FP32")]))  # fmt: skip

    text, samples = scrape(daemon.metrics_url)
    model = labels(model="add_sub", version="1")
    # Triton's names, bare (no _total), typed as counters.
    assert "# TYPE nv_inference_request_success counter\n" in text
    assert f'nv_inference_request_success{{model="add_sub",version="1"}} {GOOD}' in text
    assert samples[("nv_inference_request_success", model)] == GOOD
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert samples[("nv_inference_request_failure", labels(**dict(model), reason=reason))] == 0
    assert samples[("nv_inference_count", model)] == GOOD
    assert samples[("nv_inference_exec_count", model)] == GOOD
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert samples[(name, model)] > 0, name
    assert (
        samples[("nv_inference_request_duration_us", model)]
        >= samples[("nv_inference_compute_infer_duration_us", model)]
    )
    assert samples[("nv_inference_pending_request_count", model)] == 0
    assert samples[("pbd_model_instances", model)] == 1
    assert samples[("pbd_model_instances_ready", model)] == 1
    assert samples[("pbd_model_ready", model)] == 1
    instance = dict(model, instance="add_sub_0_0")  # Triton: <group>_<n>, group <model>_<i>
    arena = samples[("pbd_shm_arena_bytes", labels(**instance, side="daemon"))]
    # With front-end processes the inputs come in their arenas: the daemon's stays empty.
    assert arena > 0 or daemon.front_ends()
    assert samples[("pbd_shm_arena_used_bytes", labels(**instance))] == 0  # nothing in flight
    assert samples[("pbd_inflight_requests", ())] == 0

    # The statistics extension reads the same counters.
    (stats,) = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
    assert int(stats["inference_stats"]["success"]["count"]) == GOOD
    assert int(stats["inference_stats"].get("fail", {}).get("count", 0)) == 0


def test_custom_model_metrics(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {"custom_metrics": TEST_MODELS / "custom_metrics"})
    daemon = start_daemon(repo, settle=["custom_metrics"])
    client = daemon.client()
    inputs = [np.full(n, 2.0, dtype=np.float32) for n in (1, 3, 10, 60)]  # sums 2, 6, 20, 120
    for data in inputs:
        client.infer("custom_metrics", [infer_input("INPUT0", data, "FP32")])

    text, samples = scrape(daemon.metrics_url)
    model = labels(model="custom_metrics", version="1")
    # Both instances made the same series: one counter, summed over the instances.
    assert "# HELP custom_requests Requests this model served\n" in text
    assert "# TYPE custom_requests counter\n" in text
    assert text.count('custom_requests{model="custom_metrics",version="1"}') == 1
    assert samples[("custom_requests", model)] == len(inputs)
    assert "# TYPE custom_last_size gauge\n" in text
    assert samples[("custom_last_size", model)] == 60
    assert "# TYPE custom_input_sum histogram\n" in text
    expected = {"1": 0, "10": 2, "100": 3, "+Inf": 4}
    for le, count in expected.items():
        assert samples[("custom_input_sum_bucket", labels(**dict(model), le=le))] == count, le
    assert samples[("custom_input_sum_count", model)] == len(inputs)
    assert samples[("custom_input_sum_sum", model)] == 148.0

    # The API's contract, checked inside the model (fails the request if it does not hold).
    data = np.ones(2, dtype=np.float32)
    client.infer(
        "custom_metrics", [infer_input("INPUT0", data, "FP32")], parameters={"check": True}
    )
    _, samples = scrape(daemon.metrics_url)
    assert samples[("custom_requests", model)] == len(inputs) + 1
    # The check's families went with the objects the model dropped.
    assert not any(name.startswith("check_") for name, _ in samples)


def _listening_ports(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on (from /proc: its socket inodes in LISTEN state)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_metrics_disabled_leaves_no_listener(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    daemon = start_daemon(repo, "--allow-metrics", "false", settle=["add_sub"])
    assert "Metrics server listening" not in daemon.log()
    http_port = int(daemon.http_url.rsplit(":", 1)[1])
    assert _listening_ports(daemon.pid) == {daemon.port, http_port}


# Triton's nv_* families (docs/user_guide/metrics.md, and the reason label Triton 2.51 puts on
# failures): name -> (type, label names). pbd must export exactly these for each it exports.
TRITON_FAMILIES = {
    "nv_inference_request_success": ("counter", {"model", "version"}),
    "nv_inference_request_failure": ("counter", {"model", "version", "reason"}),
    "nv_inference_count": ("counter", {"model", "version"}),
    "nv_inference_exec_count": ("counter", {"model", "version"}),
    "nv_inference_request_duration_us": ("counter", {"model", "version"}),
    "nv_inference_queue_duration_us": ("counter", {"model", "version"}),
    "nv_inference_compute_input_duration_us": ("counter", {"model", "version"}),
    "nv_inference_compute_infer_duration_us": ("counter", {"model", "version"}),
    "nv_inference_compute_output_duration_us": ("counter", {"model", "version"}),
    "nv_inference_pending_request_count": ("gauge", {"model", "version"}),
    "nv_cpu_utilization": ("gauge", set()),
    "nv_cpu_memory_total_bytes": ("gauge", set()),
    "nv_cpu_memory_used_bytes": ("gauge", set()),
}
TRITON_FAILURE_REASONS = {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
FAILING = 2


def test_nv_families_match_triton_and_failures_count_as_triton_counts_them(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"raise_in_execute": TEST_MODELS / "raise_in_execute"})
    daemon = start_daemon(repo, settle=["raise_in_execute"])
    client = daemon.client()
    bad = [infer_input("INPUT0", np.array([-1], dtype=np.int32), "INT32")]
    for _ in range(FAILING):
        error_of(lambda: client.infer("raise_in_execute", bad))
    # An invalid request (wrong datatype) never reaches the model: no failure.
    wrong = [infer_input("INPUT0", np.array([1.0], dtype=np.float32), "FP32")]
    error_of(lambda: client.infer("raise_in_execute", wrong))

    text, samples = scrape(daemon.metrics_url)
    exported = {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("nv_")}
    for name in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"):
        assert name in exported, name
    for name, family in exported.items():
        assert name in TRITON_FAMILIES, f"{name} is no Triton metric"
        kind, label_names = TRITON_FAMILIES[name]
        assert family.type == kind, name
        assert f"# TYPE {name} {kind}\n" in text, name
        for sample in family.samples:
            assert set(sample.labels) == label_names, (name, sample.labels)
    model = labels(model="raise_in_execute", version="1")
    failures = {
        reason: samples[("nv_inference_request_failure", labels(**dict(model), reason=reason))]
        for reason in TRITON_FAILURE_REASONS
    }
    assert failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": FAILING, "OTHER": 0}
    assert samples[("nv_inference_request_success", model)] == 0
    assert samples[("nv_inference_count", model)] == 0
    assert samples[("nv_inference_exec_count", model)] == 0
    for name in (
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert samples[(name, model)] == 0, name
    assert 0.0 <= samples[("nv_cpu_utilization", ())] <= 1.0
    total = samples[("nv_cpu_memory_total_bytes", ())]
    assert 0 < samples[("nv_cpu_memory_used_bytes", ())] <= total


def test_tritons_metrics_flags(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    """--metrics-config counter_latencies=false and --allow-cpu-metrics=false, as Triton."""
    repo = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    daemon = start_daemon(
        repo,
        "--metrics-config=counter_latencies=false",
        "--allow-cpu-metrics=false",
        settle=["add_sub"],
    )
    text, samples = scrape(daemon.metrics_url)
    assert samples[("nv_inference_count", labels(model="add_sub", version="1"))] == 0
    assert "_duration_us" not in text and "nv_cpu_" not in text
