"""ModelReady asks the model's is_ready() hook (cached briefly), and finalize() at unload is
bounded by --model-finalize-timeout-secs; its errors are logged."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import (
    EXAMPLE_MODELS,
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)

# pbd.instance.hooks.READY_CACHE_S: how long one is_ready() answer is reused.
READY_CACHE_S = 1.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("readiness")
    repository = make_repository(
        workdir,
        {"ready_hook": TEST_MODELS / "ready_hook", "add_sub": EXAMPLE_MODELS / "add_sub"},
    )
    with running_daemon(repository, workdir, settle=["ready_hook", "add_sub"]) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def set_mode(client: grpcclient.InferenceServerClient, mode: int) -> int:
    """Tell is_ready() what to answer next; how many times it has been called so far."""
    inputs = [infer_input("READY", np.array([mode], dtype=np.int32), "INT32")]
    return int(client.infer("ready_hook", inputs).as_numpy("READY")[0])


def wait_ready(client: grpcclient.InferenceServerClient, expected: bool) -> None:
    wait_until(
        lambda: client.is_model_ready("ready_hook") is expected,
        SETTLE_TIMEOUT_S,
        f"ModelReady of ready_hook to be {expected}",
    )


def test_is_ready_false_makes_the_model_not_ready(
    client: grpcclient.InferenceServerClient,
) -> None:
    set_mode(client, 1)
    wait_ready(client, True)
    set_mode(client, 0)
    wait_ready(client, False)
    # Not ready is not unloaded: it still serves, and comes back when is_ready() says so.
    set_mode(client, 1)
    wait_ready(client, True)
    assert client.is_model_ready("add_sub")  # a model without the hook: ready while alive


def test_is_ready_raising_makes_the_model_not_ready(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    set_mode(client, -1)
    wait_ready(client, False)
    wait_until(
        lambda: "readiness check exploded" in daemon.log(), SETTLE_TIMEOUT_S, "the error logged"
    )
    set_mode(client, 1)
    wait_ready(client, True)


def test_http_model_ready_asks_the_hook_too(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    http = httpclient.InferenceServerClient(daemon.http_url)
    try:
        set_mode(client, 0)
        wait_until(lambda: not http.is_model_ready("ready_hook"), SETTLE_TIMEOUT_S, "not ready")
        set_mode(client, 1)
        wait_until(lambda: http.is_model_ready("ready_hook"), SETTLE_TIMEOUT_S, "ready")
    finally:
        http.close()


def test_a_model_ready_flood_is_answered_from_the_cache(
    client: grpcclient.InferenceServerClient,
) -> None:
    before = set_mode(client, 1)
    began = time.monotonic()
    for _ in range(200):
        assert client.is_model_ready("ready_hook")
    elapsed = time.monotonic() - began
    calls = set_mode(client, 1) - before
    # At most one is_ready() per cache period (plus the periods the flood straddles).
    assert calls <= math.ceil(elapsed / READY_CACHE_S) + 2, (calls, elapsed)


# -- finalize() ---------------------------------------------------------------------------------


def _explicit(tmp_path: Path, start_daemon: DaemonFactory) -> Daemon:
    repository = make_repository(tmp_path, {"slow_finalize": TEST_MODELS / "slow_finalize"})
    args = ("--model-control-mode", "explicit", "--load-model", "slow_finalize")
    return start_daemon(
        repository, *args, "--model-finalize-timeout-secs", "2", settle=["slow_finalize"]
    )


def _unload_after(daemon: Daemon, mode: int) -> None:
    client = daemon.client()
    inputs = [infer_input("MODE", np.array([mode], dtype=np.int32), "INT32")]
    client.infer("slow_finalize", inputs)
    assert daemon.workers_of("slow_finalize")
    client.unload_model("slow_finalize")
    wait_until(lambda: not daemon.workers_of("slow_finalize"), SETTLE_TIMEOUT_S, "the worker to go")


def test_a_hanging_finalize_is_killed_after_the_timeout(
    tmp_path: Path, start_daemon: DaemonFactory
) -> None:
    daemon = _explicit(tmp_path, start_daemon)
    _unload_after(daemon, 1)
    assert "finalize() did not return within 2s; killing its worker" in daemon.log()
    # The daemon goes on: the model loads again.
    daemon.client().load_model("slow_finalize")
    assert daemon.client().is_model_ready("slow_finalize")


def test_a_raising_finalize_is_logged(tmp_path: Path, start_daemon: DaemonFactory) -> None:
    daemon = _explicit(tmp_path, start_daemon)
    _unload_after(daemon, 2)
    wait_until(
        lambda: "finalize() failed: RuntimeError: finalize exploded" in daemon.log(),
        SETTLE_TIMEOUT_S,
        "the finalize() error in the log",
    )
    assert "did not return within" not in daemon.log()
