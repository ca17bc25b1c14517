"""Load-driven instances end to end: up under load, back to the floor when idle, scale to
zero and cold start. Every request of the run must succeed, counted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import TEST_MODELS, DaemonFactory, infer_input, make_repository, wait_until

from pbd import cli as pbd_cli

CLIENTS = 4
REQUESTS_PER_CLIENT = 30
DELAY_MS = 100


def _sleep_request(client: grpcclient.InferenceServerClient, model: str) -> int:
    inputs = [infer_input("DELAY_MS", np.array([DELAY_MS], np.int32), "INT32")]
    return int(client.infer(model, inputs).as_numpy("PID")[0])


def test_scales_up_under_load_and_back_down_without_losing_a_request(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"autoscale_sleep": TEST_MODELS / "autoscale_sleep"})
    daemon = start_daemon(repo, settle=["autoscale_sleep"])
    assert len(daemon.workers_of("autoscale_sleep")) == 1
    served_by: list[int] = []
    errors: list[BaseException] = []
    peak = [1]
    lock = threading.Lock()

    def client_loop() -> None:
        client = daemon.client()
        for _ in range(REQUESTS_PER_CLIENT):
            try:
                pid = _sleep_request(client, "autoscale_sleep")
            except BaseException as exc:  # noqa: BLE001 - counted and reported below
                with lock:
                    errors.append(exc)
                continue
            with lock:
                served_by.append(pid)
                peak[0] = max(peak[0], len(daemon.workers_of("autoscale_sleep")))

    threads = [threading.Thread(target=client_loop) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert len(served_by) == CLIENTS * REQUESTS_PER_CLIENT
    assert peak[0] == 2 and len(set(served_by)) >= 2  # the ceiling (max_instances) was used
    reason = daemon.index()[("autoscale_sleep", "1")].reason
    assert "instances" in reason and "max 2" in reason
    # Idle: back to the floor of one instance, which still serves.
    wait_until(lambda: len(daemon.workers_of("autoscale_sleep")) == 1, 30, "scale down to 1")
    assert _sleep_request(daemon.client(), "autoscale_sleep") > 0


def test_scale_to_zero_then_cold_start(
    start_daemon: DaemonFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repository(tmp_path, {"autoscale_zero": TEST_MODELS / "autoscale_zero"})
    daemon = start_daemon(repo, settle=["autoscale_zero"])
    wait_until(lambda: not daemon.workers_of("autoscale_zero"), 30, "scale to zero")
    client = daemon.client()
    assert client.is_model_ready("autoscale_zero")  # ready: the next request starts one
    began = time.monotonic()
    pid = _sleep_request(client, "autoscale_zero")
    cold_start_s = time.monotonic() - began - DELAY_MS / 1000
    print(f"cold start: {cold_start_s * 1000:.0f} ms")
    assert pid in daemon.workers_of("autoscale_zero")
    # In this process: a new interpreter can take longer to start on a loaded machine than the
    # model's 3 s scale-down delay, and the instance would be gone before it asks.
    assert pbd_cli.main(["status", "--url", daemon.url]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("autoscale_zero"))
    assert "READY" in row and "instances 1 ready of 1" in row and "min 0, max 1" in row
