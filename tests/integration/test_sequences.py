"""Sequence batching through the real daemon and tritonclient: sequence_id/start/end reach the
model as correlation_id() and flags(), a sequence stays on one of two instances (its running
sum is right), Triton's errors for a request without a sequence and for one not started, and
an idle sequence is released."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
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
)

MODEL = "sequence_accumulate"
SEQUENCES = 6
STEPS = 4
IDLE_US = 300_000


@pytest.fixture
def daemon(start_daemon: DaemonFactory, tmp_path: Path) -> Daemon:
    repo = make_repository(tmp_path, {MODEL: TEST_MODELS / MODEL})
    return start_daemon(repo, settle=[MODEL])


def step(
    client: grpcclient.InferenceServerClient, key: int | str, value: int, **kw: object
) -> grpcclient.InferResult:
    tensor = infer_input("INPUT", np.array([value], dtype=np.int32), "INT32")
    return client.infer(MODEL, [tensor], sequence_id=key, client_timeout=SETTLE_TIMEOUT_S, **kw)


def text(result: grpcclient.InferResult, name: str) -> str:
    return result.as_numpy(name)[0].decode()


def run_sequence(daemon: Daemon, key: int | str) -> tuple[list[int], set[str], list[int]]:
    """``STEPS`` requests of one sequence: the sums, the instances, the flags the model saw."""
    client = daemon.client()
    sums, instances, flags = [], set(), []
    for i in range(STEPS):
        result = step(client, key, i + 1, sequence_start=i == 0, sequence_end=i == STEPS - 1)
        assert text(result, "CORRID") == str(key)
        sums.append(int(result.as_numpy("SUM")[0]))
        instances.add(text(result, "INSTANCE"))
        flags.append(int(result.as_numpy("FLAGS")[0]))
    return sums, instances, flags


def test_each_sequence_stays_on_one_instance_in_order(daemon: Daemon) -> None:
    keys: list[int | str] = [*range(1, SEQUENCES // 2 + 1), *(f"s{i}" for i in range(3))]
    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        outcomes = list(pool.map(lambda k: run_sequence(daemon, k), keys))
    used = set()
    for sums, instances, flags in outcomes:
        assert sums == [1, 3, 6, 10]  # a sequence moved elsewhere would restart from zero
        assert len(instances) == 1
        assert flags == [1, 0, 0, 2]  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END
        used |= instances
    assert len(used) == 2  # both instances took sequences


def test_tritons_errors_for_requests_outside_a_started_sequence(daemon: Daemon) -> None:
    client = daemon.client()
    tensor = infer_input("INPUT", np.array([1], dtype=np.int32), "INT32")
    no_sequence = error_of(lambda: client.infer(MODEL, [tensor], request_id="r1"))
    assert no_sequence.status() == "StatusCode.INVALID_ARGUMENT"
    assert no_sequence.message() == (
        "[request id: r1] inference request to model 'sequence_accumulate' must specify a "
        "non-zero or non-empty correlation ID"
    )
    not_started = error_of(lambda: step(client, 42, 1))
    assert not_started.status() == "StatusCode.INVALID_ARGUMENT"
    assert not_started.message().endswith(
        "inference request for sequence 42 to model 'sequence_accumulate' must specify the "
        "START flag on the first request of the sequence"
    )
    step(client, 42, 1, sequence_start=True, sequence_end=True)
    error_of(lambda: step(client, 42, 1))  # ended: it must start again


def test_an_idle_sequence_is_released(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {MODEL: TEST_MODELS / MODEL})
    config = repo / MODEL / "config.pbtxt"
    config.write_text(config.read_text().replace("600000000", str(IDLE_US)))
    daemon = start_daemon(repo, settle=[MODEL])
    client = daemon.client()
    assert int(step(client, "idle", 5, sequence_start=True).as_numpy("SUM")[0]) == 5
    time.sleep(3 * IDLE_US / 1e6)  # idle well past max_sequence_idle_microseconds
    released = error_of(lambda: step(client, "idle", 1))
    assert "must specify the START flag" in released.message()
