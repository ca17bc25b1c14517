"""KServe's Triton command line starts pbd: deploy/kserve/servingruntime.yaml's args, word for
word, run through a link named ``tritonserver`` (as the image provides it), with a copy of a
repository instead of /mnt/models and free ports instead of 9000 and 8080. Then the probes,
inference over both protocols with tritonclient, and the SIGTERM drain the manifest relies on
(Triton 2.58's: new requests refused, in-flight ones finish, not ready meanwhile)."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import sysconfig
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import (
    EXAMPLE_MODELS,
    ROOT,
    TEST_MODELS,
    Daemon,
    error_of,
    free_port,
    infer_input,
    make_repository,
    wait_until,
)
from tritonclient.utils import InferenceServerException

MANIFEST = ROOT / "deploy" / "kserve" / "servingruntime.yaml"
KSERVE_ARGS = [
    "tritonserver",
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
]


def manifest_args() -> list[str]:
    """The container's ``args`` in the manifest (a YAML list of plain scalars)."""
    text = MANIFEST.read_text()
    block = re.search(r"^(\s*)args:\n((?:\1\s+- .*\n)+)", text, re.MULTILINE)
    assert block, "no args list in the manifest"
    return [line.split("- ", 1)[1].strip() for line in block.group(2).splitlines()]


def test_the_manifest_runs_kserves_triton_command_line() -> None:
    assert manifest_args() == KSERVE_ARGS
    text = MANIFEST.read_text()
    for probe in ("/v2/health/live", "/v2/health/ready"):
        assert f"path: {probe}" in text
    assert 'prometheus.kserve.io/port: "8002"' in text


class KServeDaemon(Daemon):
    """pbd started as KServe starts Triton: the manifest's command line through a link named
    tritonserver. Addresses and the metrics port come from PBD_* variables (which the command
    line beats, and which beat Triton's defaults), so the command line stays KServe's."""

    def __init__(self, repository: Path, workdir: Path, frontends: int = 0) -> None:
        super().__init__(repository, workdir)
        self.http_port = free_port()
        self.link = workdir / "bin" / "tritonserver"
        self.link.parent.mkdir()
        console_script = Path(sysconfig.get_path("scripts")) / "pbd-tritonserver"
        assert console_script.is_file(), "pbd-tritonserver is not installed (pip install -e .)"
        self.link.symlink_to(console_script)
        self.extra_env = {
            "PBD_GRPC_ADDRESS": "127.0.0.1",
            "PBD_HTTP_ADDRESS": "127.0.0.1",
            "PBD_METRICS_PORT": str(free_port()),
            "PBD_SHM_PREFIX": self.shm_prefix,
            "PBD_EXIT_TIMEOUT_SECS": "20",
        }
        if frontends:
            self.extra_env["PBD_FRONTENDS"] = str(frontends)

    def command(self) -> list[str]:
        swap = {
            "/mnt/models": str(self.repository),
            "9000": str(self.port),
            "8080": str(self.http_port),
        }
        args = []
        for arg in manifest_args()[1:]:
            flag, _, value = arg.partition("=")
            args.append(f"{flag}={swap.get(value, value)}")
        return [str(self.link), *args]

    def http(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}") as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:  # not listening (yet, or any more)
            return 0


@contextlib.contextmanager
def _running(daemon: KServeDaemon) -> Iterator[KServeDaemon]:
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
    daemon.assert_clean_exit()


@pytest.fixture(params=[1, 2], ids=["daemon-serves", "two-front-ends"])
def kserve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KServeDaemon]:
    """The daemon serving the ports itself, and two front-end processes serving them (KServe
    signals only the container's first process, the daemon)."""
    repository = make_repository(
        tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub", "sleepy": TEST_MODELS / "sleepy"}
    )
    with _running(KServeDaemon(repository, tmp_path, request.param)) as daemon:
        daemon.wait_settled(["add_sub", "sleepy"])
        yield daemon


A = np.arange(4, dtype=np.float32)
B = np.ones(4, dtype=np.float32)


def _grpc_inputs() -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", A, "FP32"), infer_input("INPUT1", B, "FP32")]


def _check_http_inference(daemon: KServeDaemon) -> None:
    http = httpclient.InferenceServerClient(f"127.0.0.1:{daemon.http_port}")
    try:
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        result = http.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    finally:
        http.close()


def test_kserve_command_line_serves_both_protocols(kserve: KServeDaemon) -> None:
    assert kserve.http("/v2/health/live") == 200
    assert kserve.http("/v2/health/ready") == 200
    result = kserve.client().infer("add_sub", _grpc_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    _check_http_inference(kserve)
    assert "has no effect" not in kserve.log()  # every flag of KServe's is honoured


def test_sigterm_drains_as_triton_2_58(kserve: KServeDaemon, tmp_path: Path) -> None:
    """In flight: the answer; new requests: UNAVAILABLE; readiness false, liveness true."""
    marker = tmp_path / "executing"
    outcome: dict[str, object] = {}

    def slow() -> None:
        inputs = [
            infer_input("DELAY_MS", np.array([2000], np.int32), "INT32"),
            infer_input("MARKER", np.array([str(marker).encode()], np.object_), "BYTES"),
        ]
        client = grpcclient.InferenceServerClient(kserve.url)
        try:
            outcome["slept"] = client.infer("sleepy", inputs).as_numpy("SLEPT_MS")
        finally:
            client.close()

    request = threading.Thread(target=slow)
    request.start()
    wait_until(marker.exists, 30, "the request to reach the model")
    kserve.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    wait_until(lambda: kserve.http("/v2/health/ready") != 200, 10, "readiness to turn false")
    assert kserve.http("/v2/health/live") == 200
    refused = error_of(lambda: kserve.client().infer("add_sub", _grpc_inputs()))
    assert refused.status() == "StatusCode.UNAVAILABLE"
    assert refused.message() == (
        "GRPC server is shutting down and has stopped accepting new requests."
    )
    request.join(30)
    np.testing.assert_array_equal(outcome["slept"], [2000])


class HttpOnlyDaemon(KServeDaemon):
    """The same command line, then ``--allow-grpc=false`` (the last value counts, as in
    Triton): only the HTTP binding listens."""

    def command(self) -> list[str]:
        return [*super().command(), "--allow-grpc=false"]

    def _wait_live(self) -> None:
        wait_until(lambda: self.http("/v2/health/ready") == 200, 120, "HTTP to be ready")


def test_allow_grpc_false_serves_http_only(tmp_path: Path) -> None:
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    with _running(HttpOnlyDaemon(repository, tmp_path)) as daemon:
        _check_http_inference(daemon)
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", daemon.port)) != 0  # nothing on gRPC's port
        assert "gRPC server listening" not in daemon.log()


# Echoes INPUT0 after DELAY_MS, two instances (the container suite's model, KServe's pod).
SLOW_IDENTITY = ROOT / "tests" / "container" / "models" / "slow_identity"


@pytest.mark.parametrize("frontends", [1, 2], ids=["daemon-serves", "two-front-ends"])
def test_sigterm_drain_sends_large_answers_whole(tmp_path: Path, frontends: int) -> None:
    """Two 16 MiB answers finish while the server stops: each leaves whole, though the
    client's flow-control window holds most of it back after the handler returned."""
    repository = make_repository(tmp_path, {"slow_identity": SLOW_IDENTITY})
    data = np.arange(4 * 1024 * 1024, dtype=np.float32)
    outcome: dict[int, object] = {}

    with _running(KServeDaemon(repository, tmp_path, frontends)) as daemon:
        daemon.wait_settled(["slow_identity"])
        markers = [tmp_path / f"executing-{i}" for i in range(2)]

        def slow(i: int) -> None:
            inputs = [
                infer_input("INPUT0", data, "FP32"),
                infer_input("DELAY_MS", np.array([1500], np.int32), "INT32"),
                infer_input("MARKER", np.array([str(markers[i]).encode()], np.object_), "BYTES"),
            ]
            client = grpcclient.InferenceServerClient(daemon.url)
            try:
                outcome[i] = client.infer("slow_identity", inputs).as_numpy("OUTPUT0")
            except InferenceServerException as error:  # what the client saw: asserted below
                outcome[i] = error
            finally:
                client.close()

        requests = [threading.Thread(target=slow, args=(i,)) for i in range(2)]
        for request in requests:
            request.start()
        wait_until(lambda: all(m.exists() for m in markers), 30, "both requests to execute")
        daemon.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for request in requests:
            request.join(60)
    for i in range(2):
        assert isinstance(outcome[i], np.ndarray), f"request {i}: {outcome[i]}"
        np.testing.assert_array_equal(outcome[i], data)
