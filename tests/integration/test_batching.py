"""Dynamic batching through the real daemon and tritonclient: concurrent requests reach one
execute() and each gets its own answer; no dynamic_batching, one request per execute;
priorities; queue timeouts and full priority queues with Triton's messages; batch_stats."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import (
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    wait_until,
)
from test_metrics import labels, scrape
from traffic import executing
from tritonclient.utils import InferenceServerException

MODEL = "batch_recorder"
# So long that a batch only goes once it is full (or reaches a preferred size).
FOREVER_US = 600_000_000
SINGLE_ONLY = ["--worker-pipeline-depth", "1"]
# How long a test watches for an answer that must not come (a wrong one would come at once).
OBSERVE_S = 1.0


def repository(tmp_path: Path, scheduling: str) -> Path:
    repo = make_repository(tmp_path, {MODEL: TEST_MODELS / MODEL})
    with open(repo / MODEL / "config.pbtxt", "a") as config:
        config.write(scheduling + "\n")
    return repo


def inputs(x: list[int], gate: Path | None = None) -> list[grpcclient.InferInput]:
    """A request of batch ``len(x)``."""
    tensors = [infer_input("X", np.array(x, dtype=np.int32).reshape(-1, 1), "INT32")]
    if gate is not None:
        path = np.array([[str(gate).encode()]] * len(x), dtype=np.object_)
        tensors.append(infer_input("GATE", path, "BYTES"))
    return tensors


def send(
    pool: ThreadPoolExecutor, daemon: Daemon, x: list[int], **kw: object
) -> Future[grpcclient.InferResult]:
    client = daemon.client()
    return pool.submit(client.infer, MODEL, inputs(x), client_timeout=SETTLE_TIMEOUT_S, **kw)


def hold_instance(pool: ThreadPoolExecutor, daemon: Daemon, gate: Path) -> Future[object]:
    """A request that keeps the only instance busy until ``gate`` is removed."""
    gate.touch()
    client = daemon.client()
    held = pool.submit(client.infer, MODEL, inputs([-1], gate), client_timeout=SETTLE_TIMEOUT_S)
    wait_until(executing(gate).exists, SETTLE_TIMEOUT_S, "the gated request to run")
    return held


def queued(daemon: Daemon) -> float:
    _, samples = scrape(daemon.metrics_url)
    return samples[("nv_inference_pending_request_count", labels(model=MODEL, version="1"))]


def executions(daemon: Daemon) -> int:
    stats = daemon.control().get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    return int(stats.get("execution_count", 0))


def column(result: grpcclient.InferResult, name: str) -> list[int]:
    return [int(v) for v in result.as_numpy(name).reshape(-1)]


def test_concurrent_requests_reach_one_execute_and_each_gets_its_rows(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    scheduling = (
        f"dynamic_batching {{ max_queue_delay_microseconds: {FOREVER_US} "
        "preferred_batch_size: [ 4 ] }"
    )
    daemon = start_daemon(repository(tmp_path, scheduling), settle=[MODEL])
    rows = [[10, 11], [20], [30]]  # 4 rows: the preferred size
    with ThreadPoolExecutor(max_workers=len(rows)) as pool:
        futures = [send(pool, daemon, x) for x in rows]
        results = [f.result(timeout=SETTLE_TIMEOUT_S) for f in futures]
    for x, result in zip(rows, results, strict=True):
        assert column(result, "Y") == x
        assert set(column(result, "REQUESTS")) == {3} and set(column(result, "ROWS")) == {4}
    assert sorted(column(r, "POSITION")[0] for r in results) == [0, 1, 2]
    stats = daemon.control().get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    assert int(stats["execution_count"]) == 1 and int(stats["inference_count"]) == 4
    (batch,) = stats["batch_stats"]
    assert int(batch["batch_size"]) == 4 and int(batch["compute_infer"]["count"]) == 1


def test_without_dynamic_batching_each_request_runs_alone(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = start_daemon(repository(tmp_path, ""), *SINGLE_ONLY, settle=[MODEL])
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(max_workers=4) as pool:
        held = hold_instance(pool, daemon, gate)
        futures = [send(pool, daemon, [i]) for i in range(3)]
        wait_until(lambda: queued(daemon) == 3, SETTLE_TIMEOUT_S, "three queued requests")
        gate.unlink()
        held.result(timeout=SETTLE_TIMEOUT_S)
        results = [f.result(timeout=SETTLE_TIMEOUT_S) for f in futures]
    assert [column(r, "REQUESTS") for r in results] == [[1]] * 3
    assert [column(r, "Y") for r in results] == [[0], [1], [2]]


def test_a_higher_priority_request_is_served_first(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    scheduling = "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"
    daemon = start_daemon(repository(tmp_path, scheduling), *SINGLE_ONLY, settle=[MODEL])
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(max_workers=3) as pool:
        held = hold_instance(pool, daemon, gate)
        low = send(pool, daemon, [1])  # priority 0: the default level, 2
        wait_until(lambda: queued(daemon) == 1, SETTLE_TIMEOUT_S, "the first request queued")
        high = send(pool, daemon, [2], priority=1)
        wait_until(lambda: queued(daemon) == 2, SETTLE_TIMEOUT_S, "the second request queued")
        gate.unlink()
        held.result(timeout=SETTLE_TIMEOUT_S)
        first, second = (f.result(timeout=SETTLE_TIMEOUT_S) for f in (high, low))

    def place(result: grpcclient.InferResult) -> tuple[int, int]:
        return column(result, "EXECUTION")[0], column(result, "POSITION")[0]

    assert place(first) < place(second)


def test_queue_timeouts_and_full_priority_queues_refuse_with_tritons_messages(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    scheduling = (
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "default_queue_policy { allow_timeout_override: true } "
        "priority_queue_policy { key: 1 value { max_queue_size: 1 } } }"
    )
    # The daemon's queues: they refuse a request the moment its timeout passes (a worker
    # batching front ends' requests checks when it forms its next batch; test_front_batcher).
    daemon = start_daemon(
        repository(tmp_path, scheduling), *SINGLE_ONLY, "--frontend-direct", "false", settle=[MODEL]
    )
    gate = tmp_path / "gate"
    client = daemon.client()
    with ThreadPoolExecutor(max_workers=3) as pool:
        held = hold_instance(pool, daemon, gate)
        # Queued behind the gated request, past its 1 ms: refused while the gate is closed.
        timed_out = error_of(lambda: client.infer(MODEL, inputs([1]), timeout=1000))
        waiting = send(pool, daemon, [2], priority=1)
        wait_until(lambda: queued(daemon) == 1, SETTLE_TIMEOUT_S, "the first request queued")
        full = error_of(lambda: client.infer(MODEL, inputs([3]), priority=1))
        gate.unlink()
        held.result(timeout=SETTLE_TIMEOUT_S)
        assert column(waiting.result(timeout=SETTLE_TIMEOUT_S), "Y") == [2]
    assert timed_out.status() == "StatusCode.UNAVAILABLE"
    assert timed_out.message() == "Request timeout expired"
    assert full.status() == "StatusCode.UNAVAILABLE"
    assert full.message().startswith("Exceeds maximum queue size")


def test_a_full_queue_refuses_on_the_direct_path_across_two_front_ends(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """max_queue_size with two front ends: the requests go straight to the worker (none is
    given to the instance by the daemon), which bounds its queue while the model is busy and
    refuses the rest in Triton's words (pbd_worker.front_batcher)."""
    scheduling = "dynamic_batching { default_queue_policy { max_queue_size: 2 } }"
    daemon = start_daemon(
        repository(tmp_path, scheduling), "--frontends", "2", "--log-verbose", "1", settle=[MODEL]
    )
    gate = tmp_path / "gate"
    extra = 6
    seen = len(daemon.log())
    with ThreadPoolExecutor(max_workers=1 + extra) as pool:
        held = hold_instance(pool, daemon, gate)
        waiting = [send(pool, daemon, [i]) for i in range(1, 1 + extra)]
        time.sleep(OBSERVE_S)  # they reach the worker's links while the model is held
        gate.unlink()
        held.result(timeout=SETTLE_TIMEOUT_S)
        served, refused = [], []
        for future in waiting:
            try:
                served.append(column(future.result(timeout=SETTLE_TIMEOUT_S), "Y"))
            except InferenceServerException as exc:
                refused.append(exc)
    assert f"{MODEL}/1: request given to instance" not in daemon.log()[seen:]
    # Two may wait behind the one the freed model takes first (Triton: two in all).
    assert len(served) == 3 and len(refused) == extra - 3, daemon.log_tail()
    for error in refused:
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == (
            f"Exceeds maximum queue size: model '{MODEL}' version 1 already has 2 requests "
            "waiting (max_queue_size 2)"
        )


@pytest.mark.parametrize("ordered", [True, False])
def test_preserve_ordering_across_instances(
    start_daemon: DaemonFactory, tmp_path: Path, ordered: bool
) -> None:
    scheduling = f"dynamic_batching {{ preserve_ordering: {str(ordered).lower()} }}"
    repo = repository(tmp_path, scheduling)
    config = repo / MODEL / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 2"))
    daemon = start_daemon(repo, *SINGLE_ONLY, settle=[MODEL])
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(max_workers=2) as pool:
        held = hold_instance(pool, daemon, gate)  # on one instance
        later = send(pool, daemon, [1])  # runs on the other one at once
        if ordered:
            # It ran, but is answered only after the request dispatched before it.
            wait_until(lambda: executions(daemon) == 1, SETTLE_TIMEOUT_S, "the second to run")
            time.sleep(OBSERVE_S)
            assert not later.done()
        else:
            later.result(timeout=SETTLE_TIMEOUT_S)
            assert not held.done()
        gate.unlink()
        held.result(timeout=SETTLE_TIMEOUT_S)
        assert column(later.result(timeout=SETTLE_TIMEOUT_S), "Y") == [1]
