"""Faults: a model past its memory limit, a model that exits its process, the daemon killed
with SIGKILL, clients that disconnect or cancel, and readiness that follows live instances.

Each test checks what the client saw, that requests on another model kept succeeding, and
that no stale segment and no orphan worker is left.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import (
    EXAMPLE_MODELS,
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    wait_until,
)
from traffic import (
    add_sub_once,
    assert_no_orphan,
    assert_no_stale_segments,
    background_add_sub,
    executing,
    gated_inputs,
    hold_gated,
)
from tritonclient.utils import InferenceServerException

# The leaky model's limit is 512 MiB; this many 64 MiB steps certainly pass it.
LEAK_STEP_MB = 64
MAX_LEAK_STEPS = 16


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    models = {name: TEST_MODELS / name for name in ("gated", "leaky", "exits")}
    return make_repository(tmp_path, {**models, "add_sub": EXAMPLE_MODELS / "add_sub"})


ALL = ["gated", "leaky", "exits", "add_sub"]


def wait_serving(client: grpcclient.InferenceServerClient, model: str, inputs: list) -> None:
    def serves() -> bool:
        try:
            client.infer(model, inputs, client_timeout=SETTLE_TIMEOUT_S)
        except InferenceServerException as exc:
            assert exc.status() == "StatusCode.UNAVAILABLE", exc
            return False
        return True

    wait_until(serves, SETTLE_TIMEOUT_S, f"{model} to serve again")


def leak(client: grpcclient.InferenceServerClient, mb: int) -> int:
    result = client.infer("leaky", [infer_input("MB", np.array([mb], dtype=np.int32), "INT32")])
    return int(result.as_numpy("HELD_MB")[0])


def test_a_model_leaking_past_its_memory_limit_is_replaced(
    start_daemon: DaemonFactory, repository: Path
) -> None:
    daemon = start_daemon(repository, settle=ALL)
    client = daemon.client()
    (victim,) = daemon.workers_of("leaky")
    with background_add_sub(daemon):
        held = 0
        for _ in range(MAX_LEAK_STEPS):
            try:
                held = leak(client, LEAK_STEP_MB)
            except InferenceServerException as exc:
                error = exc
                break
        else:
            raise AssertionError(f"the model leaked {held} MiB and was never stopped")
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert "instance 'leaky_0_0' of model 'leaky' version 1" in error.message()
    assert "exited with status 71: the model ran out of memory" in error.message()
    assert "(memory limit 536870912 bytes)" in error.message()
    assert held < 512
    # A fresh instance, with nothing leaked yet.
    wait_serving(client, "leaky", [infer_input("MB", np.array([0], dtype=np.int32), "INT32")])
    assert leak(client, 1) == 1
    assert victim not in daemon.workers_of("leaky")
    assert_no_orphan(victim)
    assert_no_stale_segments(daemon)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("os._exit", "exited with status 3"),
        ("sys.exit", "exited with status 4: the model called sys.exit(4) in execute()"),
    ],
)
def test_a_model_that_exits_its_process(
    start_daemon: DaemonFactory, repository: Path, how: str, expected: str
) -> None:
    daemon = start_daemon(repository, settle=ALL)
    client = daemon.client()
    (victim,) = daemon.workers_of("exits")

    def call(text: str) -> grpcclient.InferResult:
        value = np.array([text.encode()], dtype=np.object_)
        return client.infer("exits", [infer_input("HOW", value, "BYTES")])

    with background_add_sub(daemon):
        error = error_of(lambda: call(how))
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert error.message() == (
        f"worker for instance 'exits_0_0' of model 'exits' version 1 {expected}"
    )
    wait_serving(client, "exits", [infer_input("HOW", np.array([b"hi"], np.object_), "BYTES")])
    assert call("again").as_numpy("HOW")[0] == b"again"
    assert_no_orphan(victim)
    assert_no_stale_segments(daemon)


@pytest.mark.parametrize("fronts", [(), ("--frontends", "2")], ids=["daemon", "fronts"])
def test_after_a_sigkilled_daemon_its_workers_remove_its_segments(
    repository: Path, tmp_path: Path, fronts: tuple[str, ...]
) -> None:
    """As Triton 2.51's stub after a kill -9 of tritonserver: each worker sees its daemon go
    and exits; a request in flight changes nothing. Segments are memfds: once the last
    process holding one is gone (workers, front ends), nothing is held, nothing is in
    /dev/shm, and nobody had to remove anything."""
    daemon = Daemon(repository, tmp_path, args=fronts)
    try:
        daemon.start()
        daemon.wait_settled(ALL)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = hold_gated(pool, daemon, tmp_path / "gate")
            assert daemon.shm_segments(), "a request in flight has segments"
            workers = list(daemon.workers())
            os.kill(daemon.pid, signal.SIGKILL)
            assert daemon.stop() == -signal.SIGKILL
            with pytest.raises(InferenceServerException):
                pending.result(timeout=SETTLE_TIMEOUT_S)
        (tmp_path / "gate").unlink()
        for pid in workers:
            assert_no_orphan(pid)
        try:
            wait_until(lambda: not daemon.shm_segments(), SETTLE_TIMEOUT_S, "no segment left")
        except AssertionError as error:  # which, and whose (a front end's arena, a worker's)
            raise AssertionError(f"{error}: {daemon.shm_segments()}\n{daemon.log_tail()}") from None
    finally:
        for pid in daemon.alive_seen_workers():
            os.kill(pid, signal.SIGKILL)


def test_after_a_sigkilled_daemon_and_worker_nothing_is_left_for_the_next_daemon(
    repository: Path, tmp_path: Path
) -> None:
    """A worker killed with its daemon (kill -9 of both: nobody cleans anything up) leaves
    nothing held and nothing in /dev/shm once the other workers exit; the next daemon with
    the prefix starts with nothing to sweep and serves."""
    first = Daemon(repository, tmp_path)
    second = Daemon(repository, tmp_path, shm_prefix=first.shm_prefix)
    try:
        first.start()
        first.wait_settled(ALL)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = hold_gated(pool, first, tmp_path / "gate")
            workers = list(first.workers())
            (gated,) = first.workers_of("gated")
            os.kill(first.pid, signal.SIGKILL)
            os.kill(gated, signal.SIGKILL)
            assert first.stop() == -signal.SIGKILL
            with pytest.raises(InferenceServerException) as info:
                pending.result(timeout=SETTLE_TIMEOUT_S)
        # A server killed mid-call: gRPC's client reports the broken connection as
        # UNAVAILABLE or, when the stream was reset first, CANCELLED (seen in CI).
        assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED")
        (tmp_path / "gate").unlink()
        for pid in workers:
            assert_no_orphan(pid)
        wait_until(lambda: not first.shm_segments(), SETTLE_TIMEOUT_S, "no segment held")
        second.start()
        second.wait_settled(ALL)
        assert "stale" not in second.log()
        add_sub_once(second.client())
        assert second.client().infer("gated", gated_inputs(5)).as_numpy("ID")[0] == 5
    finally:
        first.stop()
        for pid in first.alive_seen_workers():
            os.kill(pid, signal.SIGKILL)
        second.stop()
    second.assert_clean_exit()


def test_a_client_that_disconnects_mid_stream(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, settle=ALL)
    gate = tmp_path / "gate"
    gate.touch()
    streamer = grpcclient.InferenceServerClient(daemon.url)
    answers: list[object] = []
    with background_add_sub(daemon):
        streamer.start_stream(callback=lambda result, error: answers.append(error or result))
        streamer.async_stream_infer("gated", gated_inputs(1, gate))
        wait_until(executing(gate).exists, SETTLE_TIMEOUT_S, "the streamed request to run")
        streamer.stop_stream(cancel_requests=True)
        streamer.close()
        gate.unlink()  # the model finishes a request nobody waits for any more
        client = daemon.client()
        assert client.infer("gated", gated_inputs(2)).as_numpy("ID")[0] == 2
        # The stream of another client works as before.
        results: list[object] = []
        other = daemon.client()
        other.start_stream(callback=lambda result, error: results.append(error or result))
        other.async_stream_infer("gated", gated_inputs(3))
        wait_until(lambda: results, SETTLE_TIMEOUT_S, "the second stream's answer")
        other.stop_stream()
    (answer,) = results
    assert isinstance(answer, grpcclient.InferResult), answer
    assert answer.as_numpy("ID")[0] == 3
    assert_no_stale_segments(daemon)


def test_a_unary_call_cancelled_while_queued_never_runs(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, "--worker-pipeline-depth", "1", settle=ALL)
    client = daemon.client()
    with ThreadPoolExecutor(max_workers=1) as pool, background_add_sub(daemon):
        holder = hold_gated(pool, daemon, tmp_path / "gate")
        second_gate = tmp_path / "second"
        outcome: list[object] = []
        context = client.async_infer(
            "gated",
            gated_inputs(2, second_gate),
            callback=lambda result, error: outcome.append(error or result),
        )
        context.cancel()
        wait_until(lambda: outcome, SETTLE_TIMEOUT_S, "the cancelled call to end")
        (tmp_path / "gate").unlink()
        assert holder.result(timeout=SETTLE_TIMEOUT_S).as_numpy("ID")[0] == 0
        assert client.infer("gated", gated_inputs(3)).as_numpy("ID")[0] == 3
    (error,) = outcome
    assert isinstance(error, InferenceServerException)
    assert error.status() == "StatusCode.CANCELLED"
    assert not executing(second_gate).exists(), "the cancelled request was executed"
    assert_no_stale_segments(daemon)


def test_readiness_follows_live_instances(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, settle=ALL)
    client = daemon.client()
    assert client.is_server_ready() and client.is_model_ready("gated")
    (victim,) = daemon.workers_of("gated")
    hold = repository / "gated" / "hold_initialize"
    hold.touch()  # the replacement's initialize() waits until the test lets it go
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not client.is_model_ready("gated"), SETTLE_TIMEOUT_S, "ModelReady false")
    assert client.is_server_ready() is False
    assert client.is_model_ready("add_sub") is True
    add_sub_once(client)
    hold.unlink()
    wait_until(lambda: client.is_model_ready("gated"), SETTLE_TIMEOUT_S, "ModelReady true")
    wait_until(client.is_server_ready, SETTLE_TIMEOUT_S, "ServerReady true")
    assert client.infer("gated", gated_inputs(7)).as_numpy("ID")[0] == 7
    assert_no_orphan(victim)
    assert_no_stale_segments(daemon)
