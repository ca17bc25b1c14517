"""pbd installed into a private systemd the way the README says: `pbd install-units`, then
`systemctl start pbd`; helpers to look at its units and talk to it with tritonclient."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from private_systemd import PrivateSystemd

from pbd_wire.shm import held_segments

INSIDE = Path("/run/pbd-test")  # the shared directory, as the namespace sees it
PBD = str(Path(sys.executable).with_name("pbd"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def counted(client: grpcclient.InferenceServerClient) -> np.ndarray:
    """The "counted" test model's answer to [0, 1, 2, 3] (it doubles its input)."""
    x = np.arange(4, dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(x)
    return client.infer("counted", [inp]).as_numpy("OUTPUT0")


def initialize_count(systemd: PrivateSystemd) -> int:
    """How many times the "counted" model's initialize() ran, by its workers' journal."""
    return systemd.journal("-u", "pbd-worker@counted*").count("counted: initialize() ran")


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


class PbdUnits:
    def __init__(self, systemd: PrivateSystemd, shm_prefix: str, *settings: str) -> None:
        self.systemd = systemd
        self.shm_prefix = shm_prefix
        self.port = free_port()
        self.settings = [
            f"grpc_port={self.port}",
            "allow_http=false",
            "metrics_port=0",
            f"shm_prefix={shm_prefix}",
            *settings,
        ]
        self._clients: list[grpcclient.InferenceServerClient] = []

    def install(self) -> None:
        args = [
            PBD,
            "install-units",
            "--unit-dir",
            "/run/systemd/system",
            "--model-repository",
            str(INSIDE / "repository"),
        ]
        for item in self.settings:
            args += ["--setting", item]
        self.systemd.run(*args)
        # Test models write marker files: let the (read-only) units write that one directory.
        self.dropin("pbd-worker@.service", "[Service]\nReadWritePaths=/run/pbd-test/markers\n")

    def dropin(self, unit: str, text: str) -> None:
        """A test's drop-in for ``unit`` (90-test.conf), and systemd reloaded to see it."""
        self.systemd.run("mkdir", "-p", f"/run/systemd/system/{unit}.d")
        self.systemd.run("sh", "-c", f"cat > /run/systemd/system/{unit}.d/90-test.conf", input=text)
        self.systemd.systemctl("daemon-reload")

    def client(self) -> grpcclient.InferenceServerClient:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.port}")
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()

    def worker_units(self, states: str = "active") -> list[str]:
        out = self.systemd.systemctl(
            "list-units",
            "--all",
            "--plain",
            "--no-legend",
            f"--state={states}",
            "pbd-worker@*.service",
        ).stdout
        return sorted(line.split()[0] for line in out.splitlines() if line.strip())

    def main_pid(self, unit: str) -> int:
        return int(self.systemd.show(unit, "MainPID")["MainPID"])

    def daemon_log(self) -> str:
        return self.systemd.journal("-u", "pbd.service")

    def shm_segments(self) -> list[str]:
        """Segments under this daemon's prefix that some process holds (memfds), and any file
        in /dev/shm under it (there should never be one)."""
        files = [p.name for p in Path("/dev/shm").glob(f"{self.shm_prefix}-*")]
        return sorted([*files, *held_segments(f"{self.shm_prefix}-")])
