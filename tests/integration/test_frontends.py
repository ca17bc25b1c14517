"""``pbd serve --frontends 2``: what must stay one stays one across front-end processes.

Each test pins client connections to one front end or the other: while every other front end
is stopped (SIGSTOP), a new connection can only be accepted by the one left running; its
connections are then checked in ``/proc`` before the test relies on them. With the real
tritonclient over those connections: a shared-memory region registered through one front end
is used through the other; a model loaded through one is served (and known to be decoupled)
through the other at once; statistics add up; a dynamic batch forms from requests of both; a
sequence stays on one instance whatever front end its requests come through; a front end
killed loses only its own connections, is replaced, and the daemon lets go of what it held.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from pbd_harness import (
    EXAMPLE_MODELS,
    ROOT,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    _cmdline,
    _proc_stat,
    error_of,
    infer_input,
    make_repository,
    rss_anon_bytes,
    settled_heap,
    wait_until,
)
from traffic import assert_no_orphan
from tritonclient.utils import InferenceServerException

from bench.procstat import established
from pbd.fronts.front import ORDER_WAIT_S
from pbd.memory.malloc import MIB

FRONTS = ("--frontends", "2")
SHM_PREFIX = f"pbdfronts{os.getpid()}"


def fronts(daemon: Daemon | int) -> list[int]:
    """The daemon's front-end processes, by PID (index order is not kept: any order)."""
    parent = daemon if isinstance(daemon, int) else daemon.pid
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if (
                stat is not None
                and stat[1] == parent
                and stat[0] not in ("Z", "X")
                and "pbd.fronts.front" in _cmdline(int(entry.name))
            ):
                found.append(int(entry.name))
    return sorted(found)


def two_fronts(daemon: Daemon | int, without: int = 0) -> list[int]:
    """The two front ends, once both run (and neither is ``without``)."""

    def both() -> list[int] | None:
        found = fronts(daemon)
        return found if len(found) == 2 and without not in found else None

    return list(wait_until(both, 60, "two front ends"))


@contextlib.contextmanager
def only(front: int, others: list[int]) -> Iterator[None]:
    """Only ``front`` accepts connections meanwhile."""
    stopped = [pid for pid in others if pid != front]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def pinned_client(
    daemon: Daemon, front: int, others: list[int]
) -> grpcclient.InferenceServerClient:
    """A client whose connection ``front`` accepted (checked)."""
    before = established(front, daemon.port)
    with only(front, others):
        # Its own connection: grpc shares one between channels to the same target otherwise.
        client = grpcclient.InferenceServerClient(
            daemon.url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        daemon._clients.append(client)
        assert client.is_server_live()
    assert established(front, daemon.port) == before + 1
    return client


def add_sub(client: grpcclient.InferenceServerClient, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repository(
        tmp_path,
        {
            "add_sub": EXAMPLE_MODELS / "add_sub",
            "repeat_decoupled": TEST_MODELS / "repeat_decoupled",
            "sequence_accumulate": TEST_MODELS / "sequence_accumulate",
            "batch_recorder": TEST_MODELS / "batch_recorder",
        },
    )


def test_a_region_registered_through_one_front_end_is_used_through_the_other(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, "--allow-client-shm", "true", settle=["add_sub"])
    pids = two_fronts(daemon)
    first, second = (pinned_client(daemon, pid, pids) for pid in pids)
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2.0, np.float32)
    handles = []
    try:
        for name, size in (("in", 32), ("out", 32)):
            handles.append(shm.create_shared_memory_region(name, f"/{SHM_PREFIX}{name}", size))
        shm.set_shared_memory_region(handles[0], [a, b])
        first.register_system_shared_memory("in", f"/{SHM_PREFIX}in", 32)
        first.register_system_shared_memory("out", f"/{SHM_PREFIX}out", 32)
        assert set(second.get_system_shared_memory_status(as_json=True)["regions"]) == {
            "in",
            "out",
        }
        x, y = infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")
        x.set_shared_memory("in", 16)
        y.set_shared_memory("in", 16, offset=16)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("out", 16)
        second.infer("add_sub", [x, y], outputs=[out])
        assert shm.get_contents_as_numpy(handles[1], np.float32, [4]).tolist() == (a + b).tolist()
        second.unregister_system_shared_memory()
        assert first.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
    finally:
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


def test_a_model_loaded_through_one_front_end_is_served_by_the_other_at_once(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, "--model-control-mode", "explicit")
    pids = two_fronts(daemon)
    first, second = (pinned_client(daemon, pid, pids) for pid in pids)
    first.load_model("add_sub")
    first.load_model("repeat_decoupled")
    a = np.ones(4, np.float32)
    assert add_sub(second, a, a).tolist() == [2.0] * 4
    # Decoupled: the other front end knew it before the load answered (ModelStreamInfer
    # answers a decoupled model's responses as they come, and its final flag is its own).
    inputs = [
        infer_input("IN", np.array([5, 6, 7], np.int32), "INT32"),
        infer_input("DELAY", np.zeros(3, np.uint32), "UINT32"),
        infer_input("WAIT", np.zeros(1, np.uint32), "UINT32"),
    ]
    assert streamed(second, "repeat_decoupled", inputs, 3) == [[5], [6], [7]]
    first.unload_model("add_sub")
    assert not second.is_model_ready("add_sub")


def _held_decoupled(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with a decoupled model whose initialize() waits while the file returned
    (created here) exists."""
    repo = make_repository(tmp_path, {"gated_decoupled": TEST_MODELS / "gated_decoupled"})
    hold = repo / "gated_decoupled" / "hold_initialize"
    hold.write_text("held\n")
    return repo, hold


def _streams_once_loaded(clients: list[grpcclient.InferenceServerClient], hold: Path) -> None:
    """Let the held load end: then the model streams through every client's front end."""
    hold.unlink()
    wait_until(lambda: clients[1].is_model_ready("gated_decoupled"), 60, "the load to end")
    inputs = [infer_input("IN", np.array([3, 4], np.int32), "INT32")]
    for client in clients:
        assert streamed(client, "gated_decoupled", inputs, 2) == [[3], [4]]


def test_a_load_the_client_gave_up_on_reaches_every_front_end_when_it_ends(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """The load goes on after its client's deadline (Triton's way); the front ends learn the
    model (decoupled, so ModelStreamInfer must stream it) when the load ends, not at the
    next model change."""
    repo, hold = _held_decoupled(tmp_path)
    daemon = start_daemon(repo, *FRONTS, "--model-control-mode", "explicit")
    pids = two_fronts(daemon)
    clients = [pinned_client(daemon, pid, pids) for pid in pids]
    with pytest.raises(InferenceServerException, match="Deadline"):
        clients[0].load_model("gated_decoupled", client_timeout=0.5)
    _streams_once_loaded(clients, hold)


def test_a_startup_model_that_loads_after_start_up_streams_through_every_front_end(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """A startup model still loading when --startup-wait-secs ends serves once loaded, and the
    front ends learn it (decoupled: ModelStreamInfer must stream it) when its load ends.
    Before, startup loads were announced once, at start-up: a front end then took it for a
    model that answers once and answered the stream with ModelInfer's refusal."""
    repo, hold = _held_decoupled(tmp_path)
    daemon = start_daemon(repo, *FRONTS, "--startup-wait-secs", "1")
    pids = two_fronts(daemon)
    clients = [pinned_client(daemon, pid, pids) for pid in pids]
    _streams_once_loaded(clients, hold)


def test_the_first_answer_of_a_front_end_lists_the_startup_models(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """The startup loads begin before the front ends are linked: as soon as a front end
    serves, the index lists every model of the repository (here one held in initialize(),
    LOADING), as with one front end; not an empty index for the second a front end takes to
    start."""
    repo = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("held\n")
    daemon = start_daemon(repo, *FRONTS)
    assert daemon.index()[("gated", "1")].state == "LOADING"
    hold.unlink()
    daemon.wait_settled(["gated"])
    assert daemon.index()[("gated", "1")].state == "READY"


def test_statistics_add_up_across_front_ends(start_daemon: DaemonFactory, repo: Path) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["add_sub"])
    pids = two_fronts(daemon)
    first, second = (pinned_client(daemon, pid, pids) for pid in pids)
    a = np.ones(4, np.float32)
    for _ in range(3):
        add_sub(first, a, a)
    for _ in range(5):
        add_sub(second, a, a)
    for client in (first, second):
        stats = client.get_inference_statistics("add_sub").model_stats[0]
        assert stats.inference_stats.success.count == 8
        assert stats.inference_count == 8


def test_a_dynamic_batch_fills_from_both_front_ends(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    with open(repo / "batch_recorder" / "config.pbtxt", "a") as config:
        config.write("dynamic_batching { preferred_batch_size: [ 2 ] "
                     "max_queue_delay_microseconds: 600000000 }\n")  # fmt: skip
    daemon = start_daemon(repo, *FRONTS, settle=["batch_recorder"])
    pids = two_fronts(daemon)
    first, second = (pinned_client(daemon, pid, pids) for pid in pids)

    def send(client: grpcclient.InferenceServerClient, x: int) -> grpcclient.InferResult:
        tensor = infer_input("X", np.array([[x]], dtype=np.int32), "INT32")
        return client.infer("batch_recorder", [tensor], client_timeout=60)

    with ThreadPoolExecutor(2) as pool:
        answers = [pool.submit(send, first, 1), pool.submit(send, second, 2)]
        results = [f.result(timeout=60) for f in answers]
    assert [r.as_numpy("Y").tolist() for r in results] == [[[1]], [[2]]]
    # One execute() with both requests: neither would have gone alone (the delay is 10 min).
    assert [r.as_numpy("REQUESTS").tolist() for r in results] == [[[2]], [[2]]]
    stats = first.get_inference_statistics("batch_recorder").model_stats[0]
    assert (stats.execution_count, stats.inference_count) == (1, 2)


def test_a_sequence_stays_on_one_instance_from_either_front_end(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["sequence_accumulate"])
    pids = two_fronts(daemon)
    clients = [pinned_client(daemon, pid, pids) for pid in pids]
    sums, instances = [], set()
    for step, value in enumerate([1, 2, 3, 4, 5, 6]):
        client = clients[step % 2]
        tensor = infer_input("INPUT", np.array([value], dtype=np.int32), "INT32")
        result = client.infer(
            "sequence_accumulate",
            [tensor],
            sequence_id=4242,
            sequence_start=step == 0,
            sequence_end=step == 5,
        )
        sums.append(int(result.as_numpy("SUM")[0]))
        instances.add(result.as_numpy("INSTANCE")[0])
    assert sums == [1, 3, 6, 10, 15, 21]
    assert len(instances) == 1


def test_a_front_end_killed_is_replaced_and_costs_only_its_own_connections(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    daemon = start_daemon(repo, *FRONTS, settle=["add_sub"])
    pids = two_fronts(daemon)
    doomed, survivor = pids
    victim = pinned_client(daemon, doomed, pids)
    spec = json.loads(_environ(doomed)["PBD_FRONT_SPEC"])
    steady = pinned_client(daemon, survivor, pids)
    a = np.ones(4, np.float32)
    failures: list[BaseException] = []
    done = threading.Event()

    def keep_calling() -> int:
        count = 0
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            try:
                assert add_sub(steady, a, a).tolist() == [2.0] * 4
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                failures.append(exc)
            count += 1
        return count

    with ThreadPoolExecutor(1) as pool:
        calls = pool.submit(keep_calling)
        add_sub(victim, a, a)
        os.kill(doomed, signal.SIGKILL)
        replaced = two_fronts(daemon, without=doomed)
        time.sleep(0.5)  # calls keep going through the survivor meanwhile
        done.set()
        assert calls.result(timeout=60) > 0
    assert failures == []
    assert survivor in replaced
    assert f"front end {spec['index']} (pid {doomed}) was killed by SIGKILL" in daemon.log()
    # New connections are served (by either front end), the old client's too once it
    # reconnects.
    assert add_sub(daemon.client(), a, a).tolist() == [2.0] * 4
    wait_until(lambda: _answers(victim, a), 30, "the killed front end's client to reconnect")
    # Nothing of the dead front end is left in /dev/shm: its arena went with it.
    assert [n for n in daemon.shm_segments() if n.startswith(spec["arena_base"] + "-")] == []


def test_a_front_end_killed_mid_batch_fails_only_its_own_requests(
    start_daemon: DaemonFactory, repo: Path, tmp_path: Path
) -> None:
    """A batch the worker formed from both front ends' requests (pbd_worker.front_batcher):
    one front end dies while the batch runs; the other's request is answered from it."""
    with open(repo / "batch_recorder" / "config.pbtxt", "a") as config:
        config.write("dynamic_batching { preferred_batch_size: [ 2 ] "
                     "max_queue_delay_microseconds: 600000000 }\n")  # fmt: skip
    daemon = start_daemon(repo, *FRONTS, settle=["batch_recorder"])
    pids = two_fronts(daemon)
    doomed, survivor = pids
    victim, steady = (pinned_client(daemon, pid, pids) for pid in pids)
    gate = tmp_path / "gate"
    gate.touch()

    def send(client: grpcclient.InferenceServerClient, x: int) -> grpcclient.InferResult:
        tensors = [
            infer_input("X", np.array([[x]], dtype=np.int32), "INT32"),
            infer_input("GATE", np.array([[str(gate).encode()]], dtype=np.object_), "BYTES"),
        ]
        return client.infer("batch_recorder", tensors, client_timeout=60)

    with ThreadPoolExecutor(2) as pool:
        lost = pool.submit(send, victim, 1)
        kept = pool.submit(send, steady, 2)
        # Both wait in one execute() (the delay is 10 min: only the pair could start it).
        wait_until(Path(f"{gate}.executing").exists, 60, "the batch to run")
        os.kill(doomed, signal.SIGKILL)
        two_fronts(daemon, without=doomed)  # the daemon saw it and replaced it
        gate.unlink()
        answer = kept.result(timeout=60)
        with pytest.raises(InferenceServerException):
            lost.result(timeout=60)
    assert answer.as_numpy("Y").tolist() == [[2]]
    assert answer.as_numpy("REQUESTS").tolist() == [[2]]  # it ran beside the lost one
    # The worker serves on: the next pair is one batch again.
    with ThreadPoolExecutor(2) as pool:
        pair = [pool.submit(send, steady, 3), pool.submit(send, daemon.client(), 4)]
        results = [f.result(timeout=60) for f in pair]
    assert [r.as_numpy("Y").tolist() for r in results] == [[[3]], [[4]]]


def test_a_batch_formed_from_both_front_ends_makes_its_bls_calls(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """A dynamic-batching model whose execute() calls another model (BLS) for each request:
    a batch the worker formed from both front ends' requests makes both calls."""
    repo = make_repository(
        tmp_path,
        {
            "bls_batched": TEST_MODELS / "bls_identity",
            "identity_fp32": EXAMPLE_MODELS / "identity_fp32",
        },
    )
    (repo / "bls_batched" / "config.pbtxt").write_text(
        'name: "bls_batched"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "dynamic_batching { preferred_batch_size: [ 2 ] "
        "max_queue_delay_microseconds: 600000000 }\n"
    )
    daemon = start_daemon(repo, *FRONTS, settle=["bls_batched", "identity_fp32"])
    pids = two_fronts(daemon)
    clients = [pinned_client(daemon, pid, pids) for pid in pids]

    def send(client: grpcclient.InferenceServerClient, x: float) -> list[list[float]]:
        tensor = infer_input("INPUT0", np.full((1, 3), x, np.float32), "FP32")
        result = client.infer("bls_batched", [tensor], client_timeout=60)
        return result.as_numpy("OUTPUT0").tolist()

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(send, clients, (1.0, 2.0)))
    assert answers == [[[1.0] * 3], [[2.0] * 3]]
    stats = daemon.control().get_inference_statistics("bls_batched").model_stats[0]
    assert (stats.execution_count, stats.inference_count) == (1, 2)  # one execute() for both
    callee = daemon.control().get_inference_statistics("identity_fp32").model_stats[0]
    assert callee.inference_count == 2


def test_a_busy_metrics_port_ends_the_start_before_any_front_end_starts(
    repo: Path, tmp_path: Path
) -> None:
    """Every public socket is bound before a front end starts: a metrics port taken ends the
    start (exit 2, the port named) with no front end to print a traceback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        command = Daemon(repo, tmp_path, args=(*FRONTS, "--metrics-port", str(port))).command()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PBD_")}
        # Until every process holding its output is gone (front ends included).
        done = subprocess.run(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert f"cannot bind metrics server to 127.0.0.1:{port}" in done.stdout
    assert "Traceback" not in done.stdout
    assert "front end" not in done.stdout


def test_a_hung_front_end_is_killed_and_replaced(start_daemon: DaemonFactory, repo: Path) -> None:
    """A front end alive but not serving (stopped: no heartbeat on its link) is killed after
    --worker-heartbeat-timeout-secs and replaced; its client is served again."""
    daemon = start_daemon(
        repo, *FRONTS, "--worker-heartbeat-ms", "500", "--worker-heartbeat-timeout-secs", "5",
        settle=["add_sub"],
    )  # fmt: skip
    pids = two_fronts(daemon)
    hung, survivor = pids
    index = json.loads(_environ(hung)["PBD_FRONT_SPEC"])["index"]
    client = pinned_client(daemon, hung, pids)
    os.kill(hung, signal.SIGSTOP)
    try:
        replaced = two_fronts(daemon, without=hung)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung, signal.SIGKILL)
    assert survivor in replaced
    log = daemon.log()
    assert f"front end {index} (pid {hung}) sent no heartbeat for 5s; killing it" in log
    assert f"front end {index} (pid {hung}) was killed by SIGKILL; its connections are gone" in log
    a = np.ones(4, np.float32)
    wait_until(lambda: _answers(client, a), 30, "the hung front end's client to reconnect")
    assert add_sub(daemon.client(), a, a).tolist() == [2.0] * 4


def test_front_ends_whose_starts_keep_failing_are_given_up_and_the_daemon_exits_1(
    repo: Path, tmp_path: Path
) -> None:
    """The server certificate is broken while the service runs (a rotation gone wrong): front
    ends started from then on cannot serve. Each is given up after five failed starts in a
    row; with none left nothing serves the ports, and the daemon stops in order and exits 1
    (systemd then sees the failure)."""
    certs = tmp_path / "certs"
    certs.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", "server.key", "-out", "server.pem"],
        cwd=certs, check=True, capture_output=True,
    )  # fmt: skip
    tls = ("--grpc-use-ssl", "true", "--grpc-server-cert", str(certs / "server.pem"),
           "--grpc-server-key", str(certs / "server.key"))  # fmt: skip
    daemon = Daemon(repo, tmp_path, args=(*FRONTS, *tls))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PBD_")}
    with open(daemon.log_path, "wb") as out:
        process = subprocess.Popen(
            daemon.command(), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        client = grpcclient.InferenceServerClient(
            f"localhost:{daemon.port}", ssl=True, root_certificates=str(certs / "server.pem")
        )

        def live() -> bool:
            assert process.poll() is None, daemon.log()
            try:
                return bool(client.is_server_live())
            except InferenceServerException:
                return False

        wait_until(live, 120, "the daemon to serve over TLS")
        pids = two_fronts(process.pid)
        (certs / "server.pem").write_text("not a certificate\n")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        assert process.wait(timeout=120) == 1, daemon.log()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = daemon.log()
    assert "cannot serve: --grpc-use-ssl: cannot read a key or certificate" in log
    assert "before it served; starting another" in log
    for index in (0, 1):
        assert (
            f"giving up on front end {index}: its last 5 starts failed (the last exited "
            "with status 1)" in log
        )
    assert "every front end was given up: nothing serves the gRPC and HTTP ports" in log
    assert "Traceback" not in log
    for pid in pids:
        assert_no_orphan(pid)
    assert daemon.shm_segments() == []


def test_a_sigterm_to_the_whole_group_drains_as_the_daemon_serving_alone(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """systemd's stop and Ctrl-C signal every process of the service at once. The front ends
    leave the order to the daemon and keep accepting while it drains, as the daemon does
    serving alone (and Triton 2.58): a new connection to either front end gets UNAVAILABLE,
    readiness turns false, the request in flight gets its answer; then all of them exit."""
    repository = make_repository(
        tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub", "gated": TEST_MODELS / "gated"}
    )
    daemon = start_daemon(
        repository, *FRONTS, "--exit-timeout-secs", "60", settle=["add_sub", "gated"]
    )
    pids = two_fronts(daemon)
    gate = tmp_path / "gate"
    gate.write_text("held\n")
    held = daemon.client()
    inputs = [
        infer_input("ID", np.array([7], np.int32), "INT32"),
        infer_input("GATE", np.array([str(gate).encode()], np.object_), "BYTES"),
    ]
    a = np.ones(4, np.float32)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(lambda: held.infer("gated", inputs).as_numpy("ID").tolist())
        wait_until(Path(f"{gate}.executing").exists, 30, "the request to reach the model")
        for pid in [daemon.pid, *pids]:
            os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not daemon.control().is_server_ready(), 10, "readiness to turn false")
        time.sleep(ORDER_WAIT_S + 0.5)  # past the moment a front end signalled alone stops
        for pid in pids:
            refused = error_of(lambda pid=pid: add_sub(pinned_client(daemon, pid, pids), a, a))
            assert refused.status() == "StatusCode.UNAVAILABLE"
            assert refused.message() == (
                "GRPC server is shutting down and has stopped accepting new requests."
            )
        assert daemon.control().is_server_live()
        gate.unlink()
        assert answer.result(timeout=30) == [7]
    assert daemon.process is not None
    assert daemon.process.wait(timeout=30) == 0
    for pid in pids:
        assert_no_orphan(pid)
    assert "did not stop; killing it" not in daemon.log()


def test_a_front_end_signalled_alone_stops_by_itself_and_is_replaced(
    start_daemon: DaemonFactory, repo: Path
) -> None:
    """A SIGTERM to one front end (its daemon not stopping) stops that one: it lets its calls
    finish and exits, the daemon starts another, and the service goes on."""
    daemon = start_daemon(repo, *FRONTS, settle=["add_sub"])
    pids = two_fronts(daemon)
    doomed, survivor = pids
    client = pinned_client(daemon, doomed, pids)
    a = np.ones(4, np.float32)
    assert add_sub(client, a, a).tolist() == [2.0] * 4
    os.kill(doomed, signal.SIGTERM)
    replaced = two_fronts(daemon, without=doomed)
    assert survivor in replaced
    assert "exited with status 0" in daemon.log()
    assert add_sub(daemon.client(), a, a).tolist() == [2.0] * 4
    wait_until(lambda: _answers(client, a), 30, "the stopped front end's client to reconnect")


def test_a_front_end_keeps_large_requests_heap_while_busy_and_gives_it_back_when_idle(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """A front end tunes glibc's allocator as the daemon does (its heap keeps large freed
    buffers: glibc's own thresholds trimmed it after every 1 MiB call), and once a flood of
    large requests is over and it is idle, it trims its heap (pbd.memory.malloc.FloodTrim)."""
    repo = make_repository(tmp_path, {"identity_fp32": EXAMPLE_MODELS / "identity_fp32"})
    daemon = start_daemon(repo, *FRONTS, settle=["identity_fp32"])
    front, other = two_fronts(daemon)
    client = pinned_client(daemon, front, [front, other])
    before = rss_anon_bytes(front)
    big = np.arange(3 * MIB // 4, dtype=np.float32).reshape(1, -1)  # 3 MiB

    def call(_: int) -> bool:
        inputs = [infer_input("INPUT0", big, "FP32")]
        out = client.infer("identity_fp32", inputs).as_numpy("OUTPUT0")
        return bool(out is not None and out[0, -1] == big[0, -1])

    with ThreadPoolExecutor(max_workers=8) as pool:  # 8 in flight, 64 calls: 192 MiB in
        assert all(pool.map(call, range(64)))
    after = rss_anon_bytes(front)
    settled = settled_heap(front)
    print(f"front end heap: {before / MIB:.0f} -> {after / MIB:.0f} MiB, "
          f"{settled / MIB:.0f} once trimmed")  # fmt: skip
    # Tuned, the heap keeps at least a few of the 3 MiB buffers (43 -> 60..75 MiB in runs);
    # with glibc's own thresholds it keeps none (43 -> 43).
    assert after - before > 6 * MIB, "the heap did not keep the flood's buffers (untuned?)"
    assert settled < before + (after - before) / 2, "the idle front end did not trim its heap"


def test_a_sigkilled_daemons_segments_go_with_the_last_front_end_out(
    repo: Path, tmp_path: Path
) -> None:
    """The daemon killed while its front ends are stopped: its workers go first; what is
    still held then is held by the front ends (their arenas, their mappings of the workers'
    outputs); let go on, they exit, and nothing is held any more (memfds: nobody had to
    remove anything)."""
    daemon = Daemon(repo, tmp_path, args=FRONTS)
    pids: list[int] = []
    try:
        daemon.start()
        daemon.wait_settled(["add_sub"])
        pids = two_fronts(daemon)
        a = np.ones(4, np.float32)
        for pid in pids:  # an arena in each front end
            add_sub(pinned_client(daemon, pid, pids), a, a)
        workers = list(daemon.workers())
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            os.kill(daemon.pid, signal.SIGKILL)
            assert daemon.stop() == -signal.SIGKILL
            for pid in workers:
                assert_no_orphan(pid)
            assert len(daemon.shm_segments()) >= 2, daemon.shm_segments()  # an arena each
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        for pid in pids:
            assert_no_orphan(pid)
        assert daemon.shm_segments() == []
    finally:
        daemon.stop()
        for pid in [*pids, *daemon.alive_seen_workers()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def streamed(
    client: grpcclient.InferenceServerClient, model: str, inputs: list[Any], count: int
) -> list[list[int]]:
    """OUT of the first ``count`` responses ModelStreamInfer gives for one request."""
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        client.async_stream_infer(model, inputs)
        got = [answers.get(timeout=30) for _ in range(count)]
    finally:
        client.stop_stream()
    errors = [g for g in got if isinstance(g, Exception)]
    assert errors == []
    return [g.as_numpy("OUT").tolist() for g in got]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _answers(client: grpcclient.InferenceServerClient, a: np.ndarray) -> bool:
    try:
        return bool(add_sub(client, a, a).tolist() == [2.0] * 4)
    except Exception:  # noqa: BLE001 - not reconnected yet
        return False
