"""The direct path: with front-end processes, requests of a plain model version go from the
front end straight to a worker, and everything the daemon owes its clients still holds.

Which way a request went is read from the daemon's log: with ``--log-verbose 1`` the daemon
logs every request it gives an instance ("<model>/<version>: request given to instance"); a
request a front end sent directly never passes there. Each test that relies on it checks the
other way first or after (``--frontend-direct false``, or a model the direct path refuses), so
the observation itself is tested.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shutil
import signal
import threading
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    wait_until,
)
from sse_helpers import first_events_then_leave, llm_repository, post, wait_for_metric
from sse_helpers import metric as sse_metric
from streaming_helpers import STREAM_TIMEOUT_S, probe_inputs, repeat_inputs
from tritonclient.utils import InferenceServerException

FRONTS = ("--frontends", "2", "--log-verbose", "1")
GIVEN = "add_sub/1: request given to instance"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repository = make_repository(
        tmp_path,
        {
            "add_sub": EXAMPLE_MODELS / "add_sub",
            "sleepy": TEST_MODELS / "sleepy",
            "batch_recorder": TEST_MODELS / "batch_recorder",
            "default_sender": TEST_MODELS / "default_sender",
            "repeat_decoupled": TEST_MODELS / "repeat_decoupled",
            "cancel_probe_decoupled": TEST_MODELS / "cancel_probe_decoupled",
        },
    )
    with open(repository / "batch_recorder" / "config.pbtxt", "a") as config:
        config.write(  # off the direct path: ordered answers need the daemon's one queue
            "dynamic_batching { preserve_ordering: true }\n"
        )
    return repository


def add_sub(client: grpcclient.InferenceServerClient, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


def sleepy(client: grpcclient.InferenceServerClient, ms: int) -> int:
    tensor = infer_input("DELAY_MS", np.array([ms], np.int32), "INT32")
    return int(client.infer("sleepy", [tensor], client_timeout=60).as_numpy("SLEPT_MS")[0])


def on_new_connections(
    daemon: Daemon, call: Callable[[grpcclient.InferenceServerClient], object], times: int
) -> None:
    """``call`` ``times`` times, each on a connection of its own (the front ends take turns
    accepting them)."""
    for _ in range(times):
        client = grpcclient.InferenceServerClient(daemon.url)
        try:
            call(client)
        finally:
            client.close()


def direct_ready(
    daemon: Daemon,
    model: str,
    send: Callable[[grpcclient.InferenceServerClient], object] | None = None,
) -> None:
    """Until both front ends send ``model``'s requests directly: the daemon's log shows none
    of a probe's requests (each front end learns the table, then connects to the workers).
    ``send`` makes one request (default: add_sub's or sleepy's)."""

    def default(client: grpcclient.InferenceServerClient) -> object:
        if model == "add_sub":
            return add_sub(client, np.ones(4, np.float32), np.ones(4, np.float32))
        return sleepy(client, 0)

    def probe() -> bool:
        seen = len(daemon.log())
        on_new_connections(daemon, send or default, 4)  # both front ends take some
        return f"{model}/1: request given to instance" not in daemon.log()[seen:]

    wait_until(probe, 30, f"{model}'s requests to go straight to its worker")


def metric(daemon: Daemon, name: str, model: str) -> float:
    with urllib.request.urlopen(daemon.metrics_url) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {model} not in /metrics")


def test_a_plain_models_requests_skip_the_daemon_and_are_counted_there(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["add_sub"])
    direct_ready(daemon, "add_sub")
    before = daemon.client().get_inference_statistics("add_sub").model_stats[0]
    seen = len(daemon.log())
    a, b = np.arange(4, dtype=np.float32), np.full(4, 3.0, np.float32)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _i: add_sub(daemon.client(), a, b), range(40)))
    assert all(answer.tolist() == (a + b).tolist() for answer in answers)
    assert GIVEN not in daemon.log()[seen:]
    stats = daemon.client().get_inference_statistics("add_sub").model_stats[0]
    assert stats.inference_stats.success.count - before.inference_stats.success.count == 40
    assert stats.inference_count - before.inference_count == 40
    assert stats.execution_count - before.execution_count == 40
    assert (
        stats.inference_stats.compute_infer.count - before.inference_stats.compute_infer.count == 40
    )
    assert stats.last_inference >= before.last_inference
    assert metric(daemon, "nv_inference_request_success", "add_sub") == (
        stats.inference_stats.success.count
    )
    # A model the direct path refuses (preserve_ordering) still goes through the daemon.
    tensor = infer_input("X", np.array([[7]], dtype=np.int32), "INT32")
    seen = len(daemon.log())
    assert daemon.client().infer("batch_recorder", [tensor]).as_numpy("Y").tolist() == [[7]]
    assert "batch_recorder/1: " in daemon.log()[seen:]


def test_a_scaled_models_requests_go_direct_and_still_scale_it_up_and_down(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """Instances scaled with load take the direct path too: the scaler reads what the front
    ends have at each instance (``pbd.fronts.inflight``), so load it never sees in its own
    loop still starts the second instance, and idleness retires it."""
    repo = make_repository(tmp_path, {"autoscale_sleep": TEST_MODELS / "autoscale_sleep"})
    daemon = start_daemon(repo, *FRONTS, settle=["autoscale_sleep"])
    given = "autoscale_sleep/1: request given to instance"

    def one(client: grpcclient.InferenceServerClient, ms: int = 0) -> int:
        tensor = infer_input("DELAY_MS", np.array([ms], np.int32), "INT32")
        return int(client.infer("autoscale_sleep", [tensor], client_timeout=60).as_numpy("PID")[0])

    def probe() -> bool:
        seen = len(daemon.log())
        on_new_connections(daemon, one, 4)
        return given not in daemon.log()[seen:]

    wait_until(probe, 30, "the scaled model's requests to go straight to its worker")
    assert len(daemon.workers_of("autoscale_sleep")) == 1
    seen = len(daemon.log())
    peak = [1]

    def client_loop(_: int) -> list[int]:
        client = daemon.client()
        pids = []
        for _ in range(20):
            pids.append(one(client, 100))
            peak[0] = max(peak[0], len(daemon.workers_of("autoscale_sleep")))
        return pids

    with ThreadPoolExecutor(4) as pool:
        served = [pid for pids in pool.map(client_loop, range(4)) for pid in pids]
    assert len(served) == 80
    assert peak[0] == 2, daemon.log_tail()  # the load the front ends carried scaled it up
    assert given not in daemon.log()[seen:]  # every one went straight to a worker
    assert len(set(served)) >= 2
    wait_until(lambda: len(daemon.workers_of("autoscale_sleep")) == 1, 30, "scale down to 1")
    assert one(daemon.client()) > 0


def test_with_the_direct_path_off_every_request_goes_through_the_daemon(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, "--frontend-direct", "false", settle=["add_sub"])
    seen = len(daemon.log())
    a = np.ones(4, np.float32)
    for _ in range(4):
        assert add_sub(daemon.client(), a, a).tolist() == [2.0] * 4
    assert daemon.log()[seen:].count(GIVEN) == 4


def test_errors_of_a_direct_request_are_the_daemons(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["add_sub"])
    direct_ready(daemon, "add_sub")
    client = daemon.client()
    a = np.ones(4, np.float32)
    wrong = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT9", a, "FP32")]
    with pytest.raises(InferenceServerException, match="unexpected inference input 'INPUT9'"):
        client.infer("add_sub", wrong)
    short = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a[:2], "FP32")]
    with pytest.raises(InferenceServerException) as caught:
        client.infer("add_sub", short)
    assert "INPUT1" in str(caught.value)
    # Refused before the model: no failure counted (as the daemon counts them).
    stats = client.get_inference_statistics("add_sub").model_stats[0]
    assert stats.inference_stats.fail.count == 0


def test_a_response_sender_answer_comes_back_directly(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """A default-mode model answering with its response sender: the worker sends the
    response on the front end's link, and ModelInfer answers as through the daemon."""
    daemon = start_daemon(repo, *FRONTS, settle=["default_sender"])
    client = daemon.client()

    def ask(mode: str) -> grpcclient.InferResult:
        tensor = infer_input("MODE", np.array([mode.encode()], np.object_), "BYTES")
        return client.infer("default_sender", [tensor])

    direct_ready(daemon, "default_sender", lambda c: c.infer("default_sender", _mode("return")))
    seen = len(daemon.log())
    for mode, answer in (("one", "sent"), ("then_final", "sent, final apart"),
                         ("thread", "from a thread"), ("return", "returned")):  # fmt: skip
        assert ask(mode).as_numpy("TEXT")[0].decode() == answer
    with pytest.raises(InferenceServerException, match="expected a single response, got 2"):
        ask("send_and_return")
    assert "default_sender/1: request given to instance" not in daemon.log()[seen:]


def _mode(mode: str) -> list[grpcclient.InferInput]:
    return [infer_input("MODE", np.array([mode.encode()], np.object_), "BYTES")]


def test_an_unload_lets_direct_requests_in_flight_finish(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, "--model-control-mode", "explicit")
    daemon.control().load_model("sleepy")
    direct_ready(daemon, "sleepy")
    with ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(sleepy, daemon.client(), 1500) for _ in range(3)]
        (worker,) = daemon.workers_of("sleepy")
        wait_until(lambda: _in_execute(worker), 10, "the first request to reach the worker")
        daemon.control().unload_model("sleepy")
        assert [f.result(timeout=60) for f in slow] == [1500] * 3
    with pytest.raises(InferenceServerException):
        sleepy(daemon.client(), 0)


def test_a_killed_worker_fails_only_what_it_had_and_its_replacement_is_used(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["sleepy", "add_sub"])
    direct_ready(daemon, "sleepy")
    (victim,) = daemon.workers_of("sleepy")
    errors: list[str] = []

    def call() -> int:
        try:
            return sleepy(daemon.client(), 3000)
        except InferenceServerException as exc:
            errors.append(str(exc))
            return -1

    with ThreadPoolExecutor(1) as pool:
        doomed = pool.submit(call)
        wait_until(lambda: _in_execute(victim), 10, "the request to reach the worker")
        os.kill(victim, signal.SIGKILL)
        assert doomed.result(timeout=60) == -1
    # In the daemon's words, as for a request it sent itself.
    assert len(errors) == 1 and "version 1 killed by signal 9 (SIGKILL)" in errors[0], errors
    # The other model never noticed; the replacement serves sleepy, straight again.
    a = np.ones(4, np.float32)
    assert add_sub(daemon.client(), a, a).tolist() == [2.0] * 4
    wait_until(lambda: _replaced(daemon, victim), 60, "a new worker for sleepy")
    direct_ready(daemon, "sleepy")
    assert sleepy(daemon.client(), 1) == 1


def test_a_cancelled_direct_request_is_seen_by_the_model(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """The front end marks the instance's cancellation page: ``is_cancelled()`` turns true
    inside ``execute()``, as for a request the daemon sent."""
    repo = make_repository(tmp_path, {"cancel_probe": TEST_MODELS / "cancel_probe"})
    daemon = start_daemon(repo, *FRONTS, settle=["cancel_probe"])
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    idents = iter(range(1, 1000))

    def ask(
        client: grpcclient.InferenceServerClient, ident: int, timeout: float | None = 30
    ) -> grpcclient.InferResult:
        (probe_dir / f"release-{ident}").write_text("go\n")
        inputs = [
            infer_input("ID", np.array([ident], np.int32), "INT32"),
            infer_input("DIR", np.array([str(probe_dir).encode()], np.object_), "BYTES"),
        ]
        return client.infer("cancel_probe", inputs, client_timeout=timeout)

    direct_ready(daemon, "cancel_probe", lambda client: ask(client, next(idents)))
    seen = len(daemon.log())
    inputs = [
        infer_input("ID", np.array([999], np.int32), "INT32"),
        infer_input("DIR", np.array([str(probe_dir).encode()], np.object_), "BYTES"),
    ]
    with pytest.raises(InferenceServerException, match="Deadline"):
        daemon.client().infer("cancel_probe", inputs, client_timeout=1.0)
    wait_until(lambda: (probe_dir / "cancelled-999").exists(), 30, "the model to see it")
    assert "cancel_probe/1: request given to instance" not in daemon.log()[seen:]


def _in_execute(pid: int) -> bool:
    """The worker is busy (its main thread sleeping in the model, not waiting in a read)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return "hrtimer" in wchan or "nanosleep" in wchan


def _replaced(daemon: Daemon, victim: int) -> bool:
    workers = daemon.workers_of("sleepy")
    return bool(workers) and victim not in workers


def test_shutdown_answers_direct_requests_in_flight(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["sleepy"])
    direct_ready(daemon, "sleepy")
    results: list[int] = []
    started = threading.Event()

    def call() -> None:
        started.set()
        results.append(sleepy(daemon.client(), 1500))

    (pid,) = daemon.workers_of("sleepy")
    caller = threading.Thread(target=call)
    caller.start()
    started.wait(5)
    wait_until(lambda: _in_execute(pid), 10, "the request to reach the worker")
    daemon.stop()
    caller.join(60)
    assert results == [1500]


def test_at_the_exit_timeout_direct_requests_fail_in_the_daemons_words(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """Shutdown with a model that does not return: the request executing and the one waiting
    behind it in the worker are answered (UNAVAILABLE, the instance was stopped), none lost,
    and the daemon exits on its own after --exit-timeout-secs."""
    daemon = start_daemon(repo, *FRONTS, "--exit-timeout-secs", "2", settle=["sleepy"])
    direct_ready(daemon, "sleepy")
    (pid,) = daemon.workers_of("sleepy")
    errors: list[InferenceServerException] = []

    def call() -> None:
        try:
            sleepy(daemon.client(), 30_000)
        except InferenceServerException as exc:
            errors.append(exc)

    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(call) for _ in range(2)]
        wait_until(lambda: _in_execute(pid), 10, "the first request to reach the worker")
        os.kill(daemon.pid, signal.SIGTERM)
        for future in calls:
            future.result(timeout=60)
    assert daemon.process is not None
    daemon.process.wait(30)
    assert len(errors) == 2
    for error in errors:
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == (
            "instance 'sleepy_0_0' of model 'sleepy' version 1 was stopped before execute() "
            "returned (the server is shutting down; --exit-timeout-secs 2s passed)"
        ), error.message()


def test_requests_in_a_clients_regions_go_directly_with_the_daemons_checks(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """Inputs and outputs in a client's system regions: the front ends follow the daemon's
    registry, so a region registered through one connection is used at once through every
    front end, directly (the worker maps it); misuse gets the daemon's words; once
    unregistered, the name is refused through every front end."""
    daemon = start_daemon(repo, *FRONTS, "--allow-client-shm", "true", settle=["add_sub"])
    direct_ready(daemon, "add_sub")
    key = f"/pbddirect{os.getpid()}_io"
    handle = shm.create_shared_memory_region("io", key, 64)
    try:
        a, b = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
        shm.set_shared_memory_region(handle, [a, b])  # a at 0, b at 16; outputs at 32, 48
        daemon.client().register_system_shared_memory("io", key, 64)

        def in_region(client: grpcclient.InferenceServerClient, offset: int = 0) -> None:
            x, y = (grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1"))
            x.set_shared_memory("io", 16, offset=offset)
            y.set_shared_memory("io", 16, offset=16)
            o0, o1 = (grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1"))
            o0.set_shared_memory("io", 16, offset=32)
            o1.set_shared_memory("io", 16, offset=48)
            result = client.infer("add_sub", [x, y], outputs=[o0, o1])
            assert result.get_response().raw_output_contents[:] == [b"", b""]

        seen = len(daemon.log())
        for _ in range(6):  # new connections: both front ends take some
            with grpcclient.InferenceServerClient(daemon.url) as client:
                in_region(client)
        assert GIVEN not in daemon.log()[seen:]
        assert shm.get_contents_as_numpy(handle, np.float32, [4], offset=32).tolist() == [
            *(a + b).tolist()
        ]
        assert shm.get_contents_as_numpy(handle, np.float32, [4], offset=48).tolist() == [
            *(a - b).tolist()
        ]
        with grpcclient.InferenceServerClient(daemon.url) as client:
            bad = error_of(lambda: in_region(client, offset=60))
        assert (bad.status(), bad.message()) == (
            "StatusCode.INVALID_ARGUMENT",
            "Invalid offset + byte size for shared memory region: 'io'",
        )
        daemon.client().unregister_system_shared_memory("io")
        for _ in range(4):
            with grpcclient.InferenceServerClient(daemon.url) as client:
                gone = error_of(lambda client=client: in_region(client))
            assert gone.message() == "Unable to find shared memory region: 'io'"
        assert daemon.client().get_system_shared_memory_status(as_json=True).get("regions") is None
    finally:
        shm.destroy_shared_memory_region(handle)


def test_a_dynamic_batching_models_requests_skip_the_daemon_and_batch_in_the_worker(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """Dynamic batching whose settings a worker honours alone (sizes, the delay): front ends
    send its requests to the workers, which batch them (pbd_worker.front_batcher)."""
    config = repo / "batch_recorder" / "config.pbtxt"
    text = config.read_text().replace(
        "preserve_ordering: true",
        "preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 600000000",
    )
    config.write_text(text)
    daemon = start_daemon(repo, *FRONTS, settle=["batch_recorder"])

    def pair(client: grpcclient.InferenceServerClient) -> list[list[int]]:
        def one(x: int) -> list[int]:
            tensor = infer_input("X", np.array([[x]], dtype=np.int32), "INT32")
            result = client.infer("batch_recorder", [tensor], client_timeout=60)
            return [int(result.as_numpy("Y")[0][0]), int(result.as_numpy("REQUESTS")[0][0])]

        with ThreadPoolExecutor(2) as pool:  # two in flight: the preferred size goes at once
            return list(pool.map(one, (1, 2)))

    direct_ready(daemon, "batch_recorder", pair)
    before = daemon.control().get_inference_statistics("batch_recorder").model_stats[0]
    seen = len(daemon.log())
    client = grpcclient.InferenceServerClient(daemon.url)
    try:
        answers = [pair(client) for _ in range(5)]
    finally:
        client.close()
    assert "batch_recorder/1: request given to instance" not in daemon.log()[seen:]
    assert answers == [[[1, 2], [2, 2]]] * 5  # each pair in one execute()
    stats = daemon.control().get_inference_statistics("batch_recorder").model_stats[0]
    assert stats.execution_count - before.execution_count == 5
    assert stats.inference_count - before.inference_count == 10
    assert stats.inference_stats.success.count - before.inference_stats.success.count == 10


def test_a_decoupled_models_stream_skips_the_daemon_and_a_closed_stream_cancels_it(
    start_daemon: DaemonFactory, repo: Path, tmp_path: Path
) -> None:
    """ModelStreamInfer of a decoupled model: the front end streams the worker's responses
    as they come; closing the stream cancels the request in the worker."""
    daemon = start_daemon(repo, *FRONTS, settle=["repeat_decoupled", "cancel_probe_decoupled"])

    def repeat(client: grpcclient.InferenceServerClient) -> list[int]:
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        try:
            client.async_stream_infer("repeat_decoupled", repeat_inputs([4, 5, 6]))
            answers = [got.get(timeout=STREAM_TIMEOUT_S) for _ in range(3)]
        finally:
            client.stop_stream()
        assert all(error is None for _, error in answers)
        return [int(result.as_numpy("OUT")[0]) for result, _ in answers]

    direct_ready(daemon, "repeat_decoupled", repeat)
    seen = len(daemon.log())
    client = grpcclient.InferenceServerClient(daemon.url)
    try:
        assert repeat(client) == [4, 5, 6]
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("cancel_probe_decoupled", probe_inputs(3, tmp_path))
        for _ in range(2):
            result, error = got.get(timeout=STREAM_TIMEOUT_S)
            assert error is None and int(result.as_numpy("ID")[0]) == 3
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    wait_until((tmp_path / "cancelled-3").exists, 30, "the model's sender to see the cancel")
    log = daemon.log()[seen:]
    assert "repeat_decoupled/1: request given to instance" not in log
    assert "cancel_probe_decoupled/1: request given to instance" not in log
    # A ModelInfer of a decoupled model is still refused, in the daemon's words.
    error = error_of(lambda: daemon.client().infer("repeat_decoupled", repeat_inputs([1])))
    assert "doesn't support models with decoupled transaction policy" in error.message()
    stats = daemon.control().get_inference_statistics("repeat_decoupled").model_stats[0]
    assert stats.inference_stats.success.count >= 2  # the probe's and this test's


def test_with_the_first_response_histogram_requests_still_skip_the_daemon_and_are_observed(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """``--metrics-histogram-latencies``: the front ends observe their direct requests' first
    responses (a unary request's answer or error, a stream's first response) and hand the
    buckets to the daemon with their statistics; /metrics counts each request once."""
    daemon = start_daemon(
        repo, *FRONTS, "--metrics-histogram-latencies", "true",
        settle=["add_sub", "sleepy", "repeat_decoupled"],
    )  # fmt: skip
    family = "nv_inference_first_response_histogram_ms"

    def observed(model: str) -> float:
        return metric(daemon, f"{family}_count", model)

    def stream(client: grpcclient.InferenceServerClient) -> None:
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        try:
            client.async_stream_infer("repeat_decoupled", repeat_inputs([4, 5, 6]))
            assert all(got.get(timeout=STREAM_TIMEOUT_S)[1] is None for _ in range(3))
        finally:
            client.stop_stream()

    models = ("add_sub", "sleepy", "repeat_decoupled")
    direct_ready(daemon, "add_sub")
    direct_ready(daemon, "sleepy")
    direct_ready(daemon, "repeat_decoupled", stream)
    before = {model: observed(model) for model in models}
    seen = len(daemon.log())
    a = np.ones(4, np.float32)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _i: add_sub(daemon.client(), a, a), range(20)))
    # The model's error is a first response too (time.sleep of a negative time raises).
    error = error_of(lambda: sleepy(daemon.client(), -1))
    assert "sleep length must be non-negative" in error.message()
    on_new_connections(daemon, stream, 3)
    log = daemon.log()[seen:]
    assert not any(f"{model}/1: request given to instance" in log for model in models)
    wanted = {"add_sub": 20, "sleepy": 1, "repeat_decoupled": 3}
    wait_until(
        lambda: all(observed(m) == before[m] + wanted[m] for m in models),
        30,
        f"first responses {wanted} more in /metrics",
    )


def test_an_execute_past_its_time_limit_on_the_direct_path_kills_and_replaces_the_instance(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """``pbd.execute_timeout_s`` (``--execute-timeout-secs``) with the request never passing
    the daemon: the worker says its execute() ran past the limit, the daemon kills it, the
    request fails in the daemon's words and the replacement serves the next one directly."""
    with open(repo / "sleepy" / "config.pbtxt", "a") as config:
        config.write('parameters { key: "pbd.execute_timeout_s" value: { string_value: "1" } }\n')
    daemon = start_daemon(repo, *FRONTS, settle=["sleepy"])
    direct_ready(daemon, "sleepy")
    seen = len(daemon.log())
    error = error_of(lambda: sleepy(daemon.client(), 60_000))
    assert "execute() did not return within 1s" in error.message(), error.message()
    assert "the instance was killed and is being replaced" in error.message()
    assert "sleepy/1: request given to instance" not in daemon.log()[seen:]
    direct_ready(daemon, "sleepy")  # the replacement, on the direct path again
    assert sleepy(daemon.client(), 5) == 5


def _llm_repository_with_a_model_off_the_direct_path(root: Path) -> Path:
    """The LLM-shaped models, and ``scaled_llm``: tiny_llm with ``dynamic_batching`` and no
    ``max_batch_size`` (batches of one request, which only the daemon's batcher forms), which
    keeps it off the direct path (the daemon answers its requests)."""
    repository = llm_repository(root)
    scaled = repository / "scaled_llm"
    shutil.copytree(repository / "tiny_llm", scaled)
    config = scaled / "config.pbtxt"
    text = config.read_text().replace('name: "tiny_llm"', 'name: "scaled_llm"')
    config.write_text(text + "dynamic_batching { }\n")
    return repository


def _http_direct_ready(daemon: Daemon, model: str, url: str, body: str) -> None:
    """Until both front ends answer ``url`` for ``model`` themselves (new connections: each
    front end takes some); the daemon's log shows none of the probe's requests."""

    def probe() -> bool:
        seen = len(daemon.log())
        for _ in range(4):
            assert post(url, body).status == 200
        return f"{model}/1: request given to instance" not in daemon.log()[seen:]

    wait_until(probe, 30, f"{model}'s HTTP requests to go straight to its worker")


def test_generate_and_the_openai_api_of_a_direct_model_skip_the_daemon(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """A front end answers generate, generate_stream and the OpenAI routes of a model on its
    direct path itself, as the daemon answers them: the same answers as a model the daemon
    serves (``scaled_llm``: the same model, off the direct path)."""
    repository = _llm_repository_with_a_model_off_the_direct_path(tmp_path)
    settle = ["tiny_llm", "scaled_llm", "generate_probe_sync"]
    daemon = start_daemon(repository, *FRONTS, settle=settle)
    base = f"http://{daemon.http_url}"
    stream = json.dumps({"text_input": "one two three", "max_tokens": 3, "stream": True})
    _http_direct_ready(daemon, "tiny_llm", f"{base}/v2/models/tiny_llm/generate_stream", stream)
    sync = json.dumps({"text_input": "hello", "INTS": [1, 2, 3]})
    _http_direct_ready(daemon, "generate_probe_sync",
                       f"{base}/v2/models/generate_probe_sync/generate", sync)  # fmt: skip
    seen = len(daemon.log())

    def answers(model: str) -> list[tuple[Any, ...]]:
        """What each route answers for ``model``: status, content type, and the text (the
        OpenAI answers' ids and times left out), the model's name as "M"."""
        got: list[tuple[Any, ...]] = []
        generated = post(f"{base}/v2/models/{model}/generate_stream", stream)
        got.append((generated.status, generated.content_type, generated.events))
        one = json.dumps({"text_input": "one", "max_tokens": 1})
        generated = post(f"{base}/v2/models/{model}/generate", one)
        got.append((generated.status, generated.json()))
        for path, extra in (
            ("completions", {"prompt": "a b c d", "max_tokens": 3}),
            ("chat/completions", {"messages": [{"role": "user", "content": "x y z"}]}),
        ):
            for streamed in (False, True):
                body = json.dumps({"model": model, "stream": streamed, **extra})
                answer = post(f"{base}/v1/{path}", body)
                if streamed:
                    texts = [e for e in answer.events if e != "[DONE]"]
                    chunks = [json.loads(e)["choices"] for e in texts]
                    got.append((answer.status, chunks, answer.events[-1]))
                else:
                    got.append((answer.status, answer.json()["choices"]))
        unknown = post(
            f"{base}/v1/completions", json.dumps({"model": model + "_no", "prompt": "a"})
        )
        got.append((unknown.status, unknown.json()["error"]["message"]))
        return [tuple(json.loads(json.dumps(item).replace(model, "M"))) for item in got]

    direct, daemons = answers("tiny_llm"), answers("scaled_llm")
    assert direct == daemons
    assert [item[0] for item in direct] == [200] * 6 + [404]
    assert len(direct[0][2]) == 3  # the stream's three tokens, an event each
    answer = post(f"{base}/v2/models/generate_probe_sync/generate", sync)
    assert answer.status == 200
    assert answer.json() == {"model_name": "generate_probe_sync", "model_version": "1",
                             "text_output": "HELLO", "INTS_OUT": [2, 3, 4]}  # fmt: skip
    log = daemon.log()[seen:]
    assert "tiny_llm/1: request given to instance" not in log
    assert "generate_probe_sync/1: request given to instance" not in log
    assert "scaled_llm/1: " in log  # the daemon's batcher had them: the observation, checked


def test_a_client_leaving_a_direct_generate_stream_cancels_the_model(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = start_daemon(llm_repository(tmp_path), *FRONTS, settle=["tiny_llm"])
    base = f"http://{daemon.http_url}"
    url = f"{base}/v2/models/tiny_llm/generate_stream"
    _http_direct_ready(daemon, "tiny_llm", url, json.dumps({"text_input": "a", "max_tokens": 1}))
    seen = len(daemon.log())
    name = "tiny_llm_cancelled_total"
    before = sse_metric(daemon.metrics_url, name) or 0.0
    words = " ".join(f"w{i}" for i in range(300))
    body = json.dumps({"text_input": words, "max_tokens": 300, "stream": True})
    assert len(asyncio.run(first_events_then_leave(url, body, 2))) == 2
    assert wait_for_metric(daemon.metrics_url, name, before + 1) == before + 1
    assert "tiny_llm/1: request given to instance" not in daemon.log()[seen:]
