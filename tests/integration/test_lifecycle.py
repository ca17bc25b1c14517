"""Crashes and shutdown: a worker killed mid-request, and SIGTERM with a request in flight.

More faults (memory limit, exiting models, a SIGKILLed daemon, disconnects) are in
test_faults.py."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
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
    running_daemon,
    wait_until,
)
from tritonclient.utils import InferenceServerException

# Long enough that the request is certainly still running when the test acts on it; the
# tests never wait for it to elapse.
LONG_SLEEP_MS = 60_000


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return make_repository(
        tmp_path, {"sleepy": TEST_MODELS / "sleepy", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )


def sleepy_inputs(delay_ms: int, marker: Path | None = None) -> list[grpcclient.InferInput]:
    inputs = [infer_input("DELAY_MS", np.array([delay_ms], dtype=np.int32), "INT32")]
    if marker is not None:
        path = np.array([str(marker).encode()], dtype=np.object_)
        inputs.append(infer_input("MARKER", path, "BYTES"))
    return inputs


def add_sub_works(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros(4, dtype=np.float32))


def start_sleeping(
    pool: ThreadPoolExecutor, daemon: Daemon, delay_ms: int, marker: Path
) -> Future[grpcclient.InferResult]:
    """Send a sleepy request from another thread and return once the model is executing it."""
    client = daemon.client()
    # client_timeout bounds how long a broken daemon can keep the test waiting.
    future = pool.submit(
        client.infer,
        "sleepy",
        sleepy_inputs(delay_ms, marker),
        client_timeout=delay_ms / 1000 + SETTLE_TIMEOUT_S,
    )

    def executing() -> bool:
        if future.done():
            future.result()  # surfaces an early failure instead of a timeout
            raise AssertionError("the sleepy request finished before the test acted on it")
        return marker.exists()

    wait_until(executing, SETTLE_TIMEOUT_S, "the sleepy request to reach the model")
    return future


def test_worker_killed_mid_request(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, settle=["sleepy", "add_sub"])
    client = daemon.client()
    [(victim, instance)] = daemon.workers_of("sleepy").items()
    assert instance == "sleepy/1/sleepy_0_0"

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = start_sleeping(pool, daemon, LONG_SLEEP_MS, tmp_path / "executing")
        add_sub_works(client)  # another model answers while sleepy is busy
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(InferenceServerException) as info:
            future.result(timeout=SETTLE_TIMEOUT_S)
    error = info.value
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert "killed by signal" in error.message()
    assert "sleepy_0_0" in error.message()

    add_sub_works(client)  # the crash is confined to its own instance

    def serves_again() -> bool:
        try:
            result = client.infer("sleepy", sleepy_inputs(0))
        except InferenceServerException as e:
            assert e.status() == "StatusCode.UNAVAILABLE", e
            return False
        return int(result.as_numpy("SLEPT_MS")[0]) == 0

    wait_until(serves_again, SETTLE_TIMEOUT_S, "sleepy to be restarted")
    assert client.is_model_ready("sleepy") is True
    [(replacement, instance)] = daemon.workers_of("sleepy").items()
    assert replacement != victim
    assert instance == "sleepy/1/sleepy_0_0"


def test_sigterm_finishes_the_request_in_flight(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, settle=["sleepy", "add_sub"])
    workers = daemon.workers()
    assert sorted(workers.values()) == ["add_sub/1/add_sub_0_0", "sleepy/1/sleepy_0_0"]

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = start_sleeping(pool, daemon, 1_500, tmp_path / "executing")
        # Segments may be created lazily; with a request in flight some exist, so the check
        # after shutdown that none is left is meaningful.
        assert daemon.shm_segments() != []
        os.kill(daemon.pid, signal.SIGTERM)
        result = future.result(timeout=SETTLE_TIMEOUT_S)
    assert int(result.as_numpy("SLEPT_MS")[0]) == 1_500

    # Exit code 0, no shared memory and no workers left.
    daemon.assert_clean_exit()


def test_sigint_is_a_graceful_shutdown_too(start_daemon: DaemonFactory, repository: Path) -> None:
    daemon = start_daemon(repository, settle=["sleepy", "add_sub"])
    add_sub_works(daemon.client())
    os.kill(daemon.pid, signal.SIGINT)
    daemon.assert_clean_exit()


def test_requests_after_shutdown_began_are_refused(
    start_daemon: DaemonFactory, repository: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(repository, settle=["sleepy", "add_sub"])
    late_client = daemon.client()
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = start_sleeping(pool, daemon, 3_000, tmp_path / "executing")
        os.kill(daemon.pid, signal.SIGTERM)

        def not_ready() -> bool:
            try:
                return not late_client.is_server_ready()
            except InferenceServerException:
                return True  # the port no longer takes new calls: not ready either

        wait_until(not_ready, SETTLE_TIMEOUT_S, "the server to leave the ready state")
        # While the in-flight request drains, new work is refused rather than queued.
        error = error_of(lambda: late_client.infer("sleepy", sleepy_inputs(0)))
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert int(future.result(timeout=SETTLE_TIMEOUT_S).as_numpy("SLEPT_MS")[0]) == 3_000
    daemon.assert_clean_exit()


def test_settings_from_the_environment(repository: Path, tmp_path: Path) -> None:
    env = {"PBD_MODEL_CONTROL_MODE": "explicit", "PBD_LOAD_MODEL": "add_sub"}
    with running_daemon(repository, tmp_path, env=env, settle=["add_sub"]) as daemon:
        client = daemon.client()
        add_sub_works(client)
        assert client.is_model_ready("sleepy") is False
        client.load_model("sleepy")
        assert int(client.infer("sleepy", sleepy_inputs(0)).as_numpy("SLEPT_MS")[0]) == 0


def test_a_hung_execute_is_killed_and_replaced(
    start_daemon: DaemonFactory, repository: Path
) -> None:
    daemon = start_daemon(repository, "--execute-timeout-secs", "1", settle=["sleepy", "add_sub"])
    client = daemon.client()
    (old_pid,) = daemon.workers_of("sleepy")
    error = error_of(lambda: client.infer("sleepy", sleepy_inputs(5_000)))
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert "execute() did not return within 1s" in error.message()
    # The same daemon serves on, from a new worker for that instance.
    assert int(client.infer("sleepy", sleepy_inputs(0)).as_numpy("SLEPT_MS")[0]) == 0
    assert old_pid not in daemon.workers_of("sleepy")
    add_sub_works(client)


def test_a_long_initialize_logs_how_long_it_runs(tmp_path: Path) -> None:
    """A hung initialize() is not silent: the log says how long it has run (after 10 s, 30 s,
    60 s, then every minute) and RepositoryIndex (`pbd status`) says for how long it loads."""
    repo = make_repository(
        tmp_path, {"gated": TEST_MODELS / "gated", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    with running_daemon(repo, tmp_path, "--startup-wait-secs", "0") as daemon:
        line = re.compile(
            r"still loading instance 'gated_0_0' of model 'gated' version 1: initialize\(\) "
            r"running for 1\d s \(pid \d+; --model-init-timeout-secs 600\)"
        )
        try:
            wait_until(lambda: line.search(daemon.log()), 30, "the first progress line")
            reason = daemon.index()[("gated", "1")].reason
            assert re.fullmatch(r"loading: initialize\(\) of 1 instance\(s\), 1\d s", reason)
        finally:
            hold.unlink()
        daemon.wait_settled(["gated", "add_sub"])
        assert daemon.index()[("gated", "1")].state == "READY"
        assert len(line.findall(daemon.log())) == 1


def test_a_second_sigint_stops_at_once(tmp_path: Path) -> None:
    """Ctrl-C while a model loads gives the load --exit-timeout-secs to finish; Ctrl-C again
    stops now: the loading instance's worker is stopped and the daemon exits cleanly."""
    repo = make_repository(
        tmp_path, {"gated": TEST_MODELS / "gated", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    (repo / "gated" / "hold_initialize").write_text("")
    daemon = Daemon(repo, tmp_path, ("--exit-timeout-secs", "300"))
    try:
        daemon.start()
        # Waited for without an exception: one here would leave the daemon to a SIGTERM
        # during gated's load, which it gives --exit-timeout-secs 300.
        wait_until(
            lambda: getattr(daemon.index().get(("add_sub", "1")), "state", "") == "READY",
            60,
            "add_sub",
        )
        wait_until(lambda: "gated/1/gated_0_0" in daemon.workers().values(), 60, "gated's worker")
        os.kill(daemon.pid, signal.SIGINT)
        wait_until(
            lambda: "shutting down while models are still loading (gated)" in daemon.log(),
            30,
            "the first SIGINT to be taken",
        )
        began = time.monotonic()
        os.kill(daemon.pid, signal.SIGINT)
        assert daemon.process is not None
        daemon.process.wait(timeout=30)
        took = time.monotonic() - began
        assert took < 10.0, (took, daemon.log_tail())
        assert "asked again to stop: not waiting for loads or requests any longer" in daemon.log()
    finally:
        daemon.stop()
    daemon.assert_clean_exit()


def test_poll_mode_polls_while_a_startup_load_hangs(tmp_path: Path) -> None:
    """--model-control-mode poll: a model added while another's startup load hangs in
    initialize() (past --startup-wait-secs) is loaded by the poll, not once that load ends."""
    repo = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    args = ("--model-control-mode=poll", "--repository-poll-secs=0.2", "--startup-wait-secs=1")
    with running_daemon(repo, tmp_path, *args) as daemon:
        try:
            wait_until(lambda: "pbd ready" in daemon.log(), 60, "the end of the startup wait")
            shutil.copytree(EXAMPLE_MODELS / "add_sub", repo / "add_sub")
            client = daemon.client()
            wait_until(lambda: client.is_model_ready("add_sub"), 60, "the poll to load add_sub")
            add_sub_works(client)
            assert daemon.index()[("gated", "1")].state == "LOADING"
        finally:
            hold.unlink()
        daemon.wait_settled(["gated", "add_sub"])


def test_exit_on_error_counts_a_startup_load_that_fails_after_ready(tmp_path: Path) -> None:
    """--exit-on-error: a startup load still running after --startup-wait-secs (READY=1) that
    then fails (here initialize() outlives --model-init-timeout-secs) stops the daemon with
    status 1, as a failure before READY=1 does and as tritonserver exits."""
    repo = make_repository(
        tmp_path, {"gated": TEST_MODELS / "gated", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    args = (
        "--exit-on-error=true",
        "--startup-wait-secs=1",
        "--model-init-timeout-secs=4",
    )
    daemon = Daemon(repo, tmp_path, args)
    try:
        daemon.start()
        wait_until(lambda: "pbd ready" in daemon.log(), 60, "the end of the startup wait")
        assert daemon.process is not None
        assert daemon.process.wait(timeout=60) == 1, daemon.log_tail()
        log = daemon.log()
        assert "models failed to load: gated; exiting (--exit-on-error)" in log, log
    finally:
        hold.unlink()
        daemon.stop()
    assert daemon.shm_segments() == []
    assert daemon.alive_seen_workers() == []
