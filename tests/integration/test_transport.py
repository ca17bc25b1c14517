"""Listeners: a Unix socket, TLS and mutual TLS, with certificates the test makes itself.

These daemons are started here (not by the harness, which probes a plaintext TCP port) and
stopped by PID; each must exit 0.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import EXAMPLE_MODELS, ROOT, error_of, free_port, infer_input, wait_until


def _serve(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(tmp_path / "daemon.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "pbd", "serve", "--model-repository", str(EXAMPLE_MODELS),
             "--model-control-mode", "explicit", "--load-model", "add_sub",
             "--allow-http", "false", "--allow-metrics", "false",
             "--shm-prefix", f"pbdtls{os.getpid()}", *args],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        process = _serve(tmp_path, *args)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "daemon.log").read_text()


def _add_sub(client: grpcclient.InferenceServerClient) -> list[float]:
    a = np.arange(4, dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist()


def _ready(make: Callable[[], grpcclient.InferenceServerClient]) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            return bool(make().is_model_ready("add_sub"))
        except Exception:  # noqa: BLE001 - not up yet
            return False

    return probe


def test_unix_socket_listener(daemon, tmp_path: Path) -> None:  # noqa: ANN001
    socket_path = tmp_path / "grpc.sock"
    daemon("--grpc-address", f"unix:{socket_path}", "--grpc-socket-mode", "0600")
    url = f"unix:{socket_path}"
    wait_until(_ready(lambda: grpcclient.InferenceServerClient(url)), 120, "unix listener")
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
    assert _add_sub(grpcclient.InferenceServerClient(url)) == [0.0, 2.0, 4.0, 6.0]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    d = tmp_path / "certs"
    d.mkdir()
    (d / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=pbd test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", f"{who}.pem",
                 cwd=d)  # fmt: skip
    return d


def test_tls_and_mutual_tls(daemon, certs: Path) -> None:  # noqa: ANN001
    port = free_port()
    daemon("--grpc-port", str(port), "--grpc-use-ssl", "true",
           "--grpc-server-cert", str(certs / "server.pem"),
           "--grpc-server-key", str(certs / "server.key"),
           "--load-model", "identity_fp32")  # fmt: skip
    url = f"localhost:{port}"

    def tls_client() -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(
            url, ssl=True, root_certificates=str(certs / "ca.pem")
        )

    wait_until(_ready(tls_client), 120, "TLS listener")
    assert _add_sub(tls_client()) == [0.0, 2.0, 4.0, 6.0]
    # A large answer leaves in several buffers, which a plaintext socket takes in one writev;
    # over TLS they must go through the transport, which encrypts them.
    big = np.arange(3 * 2**18, dtype=np.float32).reshape(1, -1)  # 3 MiB
    answer = tls_client().infer("identity_fp32", [infer_input("INPUT0", big, "FP32")])
    assert np.array_equal(answer.as_numpy("OUTPUT0"), big)
    plain = error_of(lambda: grpcclient.InferenceServerClient(url).is_server_live())
    assert plain.status() == "StatusCode.UNAVAILABLE"

    mport = free_port()
    daemon("--grpc-port", str(mport), "--grpc-use-ssl", "true", "--grpc-use-ssl-mutual", "true",
           "--grpc-server-cert", str(certs / "server.pem"),
           "--grpc-server-key", str(certs / "server.key"),
           "--grpc-root-cert", str(certs / "ca.pem"))  # fmt: skip
    murl = f"localhost:{mport}"

    def mtls_client() -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(
            murl, ssl=True, root_certificates=str(certs / "ca.pem"),
            private_key=str(certs / "client.key"), certificate_chain=str(certs / "client.pem"),
        )  # fmt: skip

    wait_until(_ready(mtls_client), 120, "mTLS listener")
    assert _add_sub(mtls_client()) == [0.0, 2.0, 4.0, 6.0]
    no_cert = grpcclient.InferenceServerClient(
        murl, ssl=True, root_certificates=str(certs / "ca.pem")
    )
    assert error_of(lambda: no_cert.is_server_live()).status() == "StatusCode.UNAVAILABLE"


def test_restricted_protocol_needs_the_header(daemon, tmp_path: Path) -> None:  # noqa: ANN001
    port = free_port()
    daemon("--grpc-port", str(port), "--grpc-restricted-protocol", "model-repository:admin=s3cret")
    url = f"127.0.0.1:{port}"
    wait_until(_ready(lambda: grpcclient.InferenceServerClient(url)), 120, "restricted daemon")
    client = grpcclient.InferenceServerClient(url)
    refused = error_of(lambda: client.get_model_repository_index())
    assert refused.status() == "StatusCode.UNAVAILABLE"
    assert "expecting header 'triton-grpc-protocol-admin'" in refused.message()
    wrong = error_of(
        lambda: client.unload_model("add_sub", headers={"triton-grpc-protocol-admin": "no"})
    )
    assert wrong.status() == "StatusCode.UNAVAILABLE"
    index = client.get_model_repository_index(headers={"triton-grpc-protocol-admin": "s3cret"})
    assert [m.name for m in index.models if m.state == "READY"] == ["add_sub"]
    assert _add_sub(client) == [0.0, 2.0, 4.0, 6.0]  # inference is not restricted


def test_bad_listener_settings_fail_at_start(tmp_path: Path) -> None:
    for args, message in [
        (["--grpc-restricted-protocol", "nope:k=v"], "unknown group 'nope'"),
        (["--grpc-use-ssl", "true", "--grpc-server-cert", "/no/cert",
          "--grpc-server-key", "/no/key"], "cannot read a key or certificate"),
    ]:  # fmt: skip
        process = _serve(tmp_path, "--grpc-port", str(free_port()), *args)
        assert process.wait(timeout=60) == 2
        assert message in (tmp_path / "daemon.log").read_text()
