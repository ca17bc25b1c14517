"""The servers under test as child processes: start, wait until ready, stop by PID.

The echo server, pbd and (``python -m bench.vs_triton``) Triton. Each binds 127.0.0.1 on a port
found free just before, writes its output to a log file, and is stopped with SIGTERM to its
PID, then SIGKILL to its PID when it outlives ``grace``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import grpc
import tritonclient.grpc as grpcclient

from bench import procstat
from bench.loadgen import MODEL_INFER, build_request, check_response
from pbd_wire.shm import held_segments

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """One server process; ``argv`` must make it listen on ``127.0.0.1:<port>``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        log_path: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.port = port
        self.http_port = 0  # when the caller gave it one (Triton: start_triton does)
        self.metrics_port = 0
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_ready(self, probe: Callable[[], bool], timeout: float) -> float:
        """Poll ``probe`` until it returns True; seconds it took. Raises if the process died."""
        started = time.monotonic()
        last = "no answer yet"
        while time.monotonic() < started + timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready;"
                    f" log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if probe():
                    return time.monotonic() - started
            except Exception as exc:  # noqa: BLE001 - not up yet; kept for the timeout message
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        raise RuntimeError(
            f"{self.name} not ready after {timeout:.0f}s ({last}); log {self.log_path}"
        )

    def ready_or_stopped(self, probe: Callable[[], bool], timeout: float) -> ServerProcess:
        """:meth:`wait_ready`, this process back; stopped (by PID) when it never got ready."""
        try:
            self.wait_ready(probe, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 15.0) -> int:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; the exit code."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
        return int(self.proc.returncode)

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def echo_answers(target: str, timeout: float = 2.0) -> bool:
    """True when ``target`` answers a small ModelInfer with its input (the echo server has no
    readiness RPC, so a correct answer is its readiness)."""
    payload, data = build_request("echo", [1, 4])
    with grpc.insecure_channel(target) as channel:
        raw = channel.unary_unary(MODEL_INFER)(payload, timeout=timeout)
    check_response(raw, [1, 4], data)
    return True


def start_echo(
    python: str, log_dir: Path, malloc_tuning: bool = True, front_end: str = "grpcio"
) -> ServerProcess:
    port = free_port()
    argv = [python, "-m", "bench.echo_server", "--port", str(port), "--front-end", front_end]
    if not malloc_tuning:
        argv.append("--no-malloc-tuning")
    server = ServerProcess("echo", argv, port, log_dir / "echo.log")
    return server.ready_or_stopped(lambda: echo_answers(server.target), timeout=30)


def model_ready(target: str, model: str) -> bool:
    """ServerReady and ModelReady over KServe v2 gRPC (pbd and Triton alike)."""
    with grpcclient.InferenceServerClient(target) as client:
        return bool(client.is_server_ready() and client.is_model_ready(model))


def start_pbd(
    python: str,
    log_dir: Path,
    repository: Path,
    model: str,
    shm_prefix: str,
    extra_args: list[str],
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    name: str = "pbd",
) -> ServerProcess:
    port = free_port()
    argv = [
        python, "-m", "pbd", "serve",
        "--model-repository", str(repository),
        "--grpc-port", str(port),
        "--http-port", "0",
        "--metrics-port", "0",
        "--model-control-mode", "explicit",
        "--load-model", model,
        "--shm-prefix", shm_prefix,
        *extra_args,
    ]  # fmt: skip
    server = ServerProcess(name, argv, port, log_dir / f"{name}.log", env)
    return server.ready_or_stopped(lambda: model_ready(server.target, model), timeout=timeout)


def start_triton(
    tritonserver: str,
    log_dir: Path,
    repository: Path,
    model: str,
    extra_args: list[str],
    timeout: float = 120.0,
) -> ServerProcess:
    """Triton (``tritonserver``: the launcher scripts/triton.sh makes) serving ``model`` from
    ``repository``. Triton binds 0.0.0.0 unless told otherwise: gRPC, HTTP and metrics are
    each given 127.0.0.1 and a free port."""
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    argv = [
        tritonserver,
        "--model-repository", str(repository),
        "--model-control-mode", "explicit",
        "--load-model", model,
        "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
        "--http-address", "127.0.0.1", "--http-port", str(http_port),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
        "--allow-gpu-metrics", "false",
        "--log-verbose", "0",
        *extra_args,
    ]  # fmt: skip
    server = ServerProcess("triton", argv, grpc_port, log_dir / "triton.log")
    server.http_port, server.metrics_port = http_port, metrics_port
    return server.ready_or_stopped(lambda: model_ready(server.target, model), timeout=timeout)


def kill_leftovers(processes: dict[int, int | None]) -> list[int]:
    """Of ``{pid: start ticks}`` read before their parent was stopped, those still alive (same
    PID, same start time): killed by PID with SIGKILL, and listed."""
    left = [pid for pid, ticks in processes.items() if ticks and procstat.start_ticks(pid) == ticks]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def leftover_segments(prefix: str, shm_dir: str = "/dev/shm") -> list[str]:
    """Segments under ``prefix`` still held by some process (memfds), and files in ``shm_dir``
    under it (pbd makes none there)."""
    try:
        files = [name for name in os.listdir(shm_dir) if name.startswith(prefix)]
    except OSError:
        files = []
    return sorted([*files, *held_segments(prefix)])


def segment_bytes(prefix: str) -> int:
    """Memory the segments under ``prefix`` take (those some process holds)."""
    return sum(st.st_blocks * 512 for st in held_segments(prefix).values())
