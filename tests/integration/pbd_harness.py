"""Helpers that run the real pbd daemon as a subprocess for the integration tests.

Every daemon binds 127.0.0.1 on a free port, writes its log to a file, uses a shared-memory
prefix of its own, and is stopped by its PID. Stopping it checks the contract of a graceful
shutdown: exit code 0, no ``/dev/shm/<prefix>-*`` left, no worker process left.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from pbd.memory import malloc
from pbd.settings import Settings
from pbd_wire.shm import held_segments

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_MODELS = ROOT / "examples" / "models"
TEST_MODELS = Path(__file__).resolve().parent / "models"

# Generous: on 2 cores a repository of a dozen models starts a dozen Python workers.
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.1
LOG_TAIL_CHARS = 20_000
# The log settings a daemon started without log flags reports (Triton's defaults).
DEFAULT_LOG_SETTINGS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}

# The keys of the args dict Triton's python backend gives initialize().
TRITON_INIT_ARGS = frozenset(
    {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
)

_daemon_numbers = itertools.count()


_PR_SET_PDEATHSIG = 1


# Runs as the daemon's first program: asks for SIGTERM when the test process dies (so a
# killed pytest run leaves no daemon, and through it no worker, behind), then execs the daemon
# in the same process, so its PID is the one the test holds. Not a preexec_fn: Python code
# between fork and exec can deadlock when the test process has threads (gRPC's do), which it
# did here once in a while.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys;"
    f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, {int(signal.SIGTERM)}, 0, 0, 0);"
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_repository(root: Path, models: dict[str, Path]) -> Path:
    """Copy the given model directories into a fresh repository under ``root``."""
    repository = root / "repository"
    repository.mkdir(parents=True)
    for name, source in models.items():
        shutil.copytree(source, repository / name)
    return repository


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, starttime) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses; the fields after it do not.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_alive(pid: int, starttime: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[2] == starttime and stat[0] not in ("Z", "X")


def rss_anon_bytes(pid: int) -> int:
    """Resident heap and other private memory (not the shared-memory arenas, which stay)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


def settled_heap(pid: int) -> int:
    """The heap once the post-flood trims are done (``pbd.memory.malloc.FloodTrim``): it
    stops shrinking (bounded wait)."""
    last = rss_anon_bytes(pid)
    for _ in range(10):
        time.sleep(malloc.TRIM_AGAIN_S / 2)
        now = rss_anon_bytes(pid)
        if now >= last:
            return now
        last = now
    return last


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


def error_of(call: Callable[[], Any]) -> InferenceServerException:
    """Run ``call``, which must fail with an InferenceServerException, and return it."""
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


class Daemon:
    """One ``pbd serve`` subprocess."""

    def __init__(
        self,
        repository: Path,
        workdir: Path,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        shm_prefix: str | None = None,
    ) -> None:
        self.repository = repository
        self.extra_env = env or {}
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.shm_prefix = shm_prefix or f"pbdtest{os.getpid()}n{next(_daemon_numbers)}"
        self.log_path = workdir / f"{self.shm_prefix}n{next(_daemon_numbers)}.log"
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self._clients: list[grpcclient.InferenceServerClient] = []
        self._control: grpcclient.InferenceServerClient | None = None
        self._seen_workers: dict[int, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The daemon's command line (a subclass may start it another way)."""
        command = [
            sys.executable, "-m", "pbd", "serve",
            "--model-repository", str(self.repository),
            "--grpc-address", "127.0.0.1",
            "--grpc-port", str(self.port),
            "--http-port", "0",  # the daemon picks a free one and logs it (see http_url)
            "--metrics-port", "0",  # likewise (see metrics_url)
            "--shm-prefix", self.shm_prefix,
            *self.args,
        ]  # fmt: skip
        # PBD_TEST_FRONTENDS=N runs every daemon of the suite with N front-end processes.
        fronts = os.environ.get("PBD_TEST_FRONTENDS", "")
        if fronts and "--frontends" not in self.args:
            command += ["--frontends", fronts]
        return command

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PBD_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _DIE_WITH_PARENT, *self.command()],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )
        self._wait_live()

    def _wait_live(self) -> None:
        probe = self.control()

        def live() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode} during start")
            try:
                return bool(probe.is_server_live())
            except InferenceServerException:
                return False

        try:
            wait_until(live, START_TIMEOUT_S, "the daemon to be live")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log_tail()}") from None

    def stop(self) -> int:
        """SIGTERM by PID and wait; a daemon that does not exit in time is killed (and fails)."""
        if self.process is None:
            return 0
        if self.returncode is None:
            self.workers()  # remember the workers alive right now, to check they go away
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self.returncode = -signal.SIGKILL
                self._close_clients()
                raise AssertionError(
                    f"daemon {self.process.pid} ignored SIGTERM for {STOP_TIMEOUT_S:g}s\n"
                    f"{self.log_tail()}"
                ) from None
            self._close_clients()
        return self.returncode

    def assert_clean_exit(self) -> None:
        rc = self.stop()
        assert rc == 0, f"daemon exited with {rc}\n{self.log_tail()}"
        assert self.shm_segments() == [], f"shared memory left behind\n{self.log_tail()}"
        # The daemon reaps its workers before it exits; allow the kernel a moment to finish.
        deadline = time.monotonic() + 10.0
        alive = self.alive_seen_workers()
        while alive and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
            alive = self.alive_seen_workers()
        assert alive == [], f"workers still running after shutdown: {alive}\n{self.log_tail()}"

    def alive_seen_workers(self) -> list[int]:
        """Workers this helper has seen that are still running (PID reuse excluded)."""
        return [pid for pid, start in self._seen_workers.items() if _is_alive(pid, start)]

    def _close_clients(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        self._control = None

    # -- what tests use ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def client(self) -> grpcclient.InferenceServerClient:
        client = grpcclient.InferenceServerClient(self.url)
        self._clients.append(client)
        return client

    def control(self) -> grpcclient.InferenceServerClient:
        """One client kept for the helpers' own polling."""
        if self._control is None:
            self._control = self.client()
        return self._control

    def workers(self) -> dict[int, str]:
        """Worker processes (direct children running pbd_worker): PID → ``model/version/name``."""
        found: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = _proc_stat(pid)
            if stat is None or stat[1] != self.pid or stat[0] in ("Z", "X"):
                continue
            argv = _cmdline(pid)
            if "pbd_worker" not in argv:
                continue
            instance = argv[argv.index("--instance") + 1] if "--instance" in argv else ""
            found[pid] = instance
            self._seen_workers[pid] = stat[2]
        return found

    def processes(self) -> list[int]:
        """The daemon and its children that run (front ends and workers), by PID."""
        found = [self.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = _proc_stat(int(entry.name))
                if stat is not None and stat[1] == self.pid and stat[0] not in ("Z", "X"):
                    found.append(int(entry.name))
        return found

    def workers_of(self, model: str) -> dict[int, str]:
        return {pid: name for pid, name in self.workers().items() if name.startswith(model + "/")}

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP binding, as the daemon logged it."""
        found = re.search(r"HTTP server listening on ([\d.]+):(\d+)", self.log())
        assert found, "the daemon did not log its HTTP port"
        return f"{found.group(1)}:{found.group(2)}"

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` of the metrics server, as the daemon logged it."""
        found = re.search(r"Metrics server listening on ([\d.]+):(\d+)", self.log())
        assert found, "the daemon did not log its metrics port"
        return f"http://{found.group(1)}:{found.group(2)}/metrics"

    def shm_segments(self) -> list[str]:
        """This daemon's segments that some process still holds (memfds: ``held_segments``),
        and any file in /dev/shm under its prefix (there should never be one)."""
        files = [p.name for p in Path("/dev/shm").glob(f"{self.shm_prefix}-*")]
        return sorted([*files, *held_segments(f"{self.shm_prefix}-")])

    def segment_sizes(self) -> dict[str, int]:
        """The size of each segment of this daemon's that a process holds."""
        held = held_segments(f"{self.shm_prefix}-")
        return {name: st.st_size for name, st in held.items()}

    def front_ends(self) -> int:
        """Front-end processes it runs (``--frontends`` over 1, given on the command line or
        in its PBD_FRONTENDS, or the default for the CPUs here), each with its own arena."""
        command = self.command()
        if "--frontends" in command:
            given = int(command[command.index("--frontends") + 1])
        else:
            given = int(self.extra_env.get("PBD_FRONTENDS") or 0)  # not the suite's own
        count = Settings(frontends=given).front_count()
        return count if count > 1 else 0

    def segment_owners(self) -> set[str]:
        """The instances (daemon id and sequence number) whose segments some process holds;
        a replaced instance's segments must be gone, so this is never more than the live ones."""
        return {name.rsplit("-", 1)[0] for name in self.shm_segments()}

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self) -> str:
        return f"--- daemon log ({self.log_path}) ---\n{self.log()[-LOG_TAIL_CHARS:]}"

    def index(self) -> dict[tuple[str, str], Any]:
        """The repository index as ``{(name, version): entry}``."""
        response = self.control().get_model_repository_index()
        return {(m.name, m.version): m for m in response.models}

    def wait_settled(self, models: list[str]) -> None:
        """Wait until each model is READY or has failed (UNAVAILABLE) in the index."""

        def settled() -> bool:
            states: dict[str, set[str]] = {}
            for entry in self.control().get_model_repository_index().models:
                states.setdefault(entry.name, set()).add(entry.state)
            return all(states.get(m, set()) & {"READY", "UNAVAILABLE"} for m in models)

        try:
            wait_until(settled, SETTLE_TIMEOUT_S, f"models {models} to load or fail")
            if self.front_ends():
                # Front ends answer the index as soon as one is up; start-up ends (ServerReady)
                # once every one is linked and knows the models. A model that failed may keep
                # the server unready for good (strict readiness): nothing to wait for then.
                def started() -> bool:
                    index = self.control().get_model_repository_index().models
                    failed = any(entry.state == "UNAVAILABLE" for entry in index)
                    return failed or bool(self.control().is_server_ready())

                wait_until(started, SETTLE_TIMEOUT_S, "start-up to end")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log_tail()}") from None


@contextlib.contextmanager
def running_daemon(
    repository: Path,
    workdir: Path,
    *args: str,
    settle: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Daemon]:
    daemon = Daemon(repository, workdir, args, env)
    try:
        daemon.start()
        if settle:
            daemon.wait_settled(settle)
        yield daemon
    finally:
        daemon.stop()
    daemon.assert_clean_exit()


class FileSizeLimitedDaemon(Daemon):
    """A daemon whose processes may not grow a file (a memfd segment included) past
    ``limit`` bytes (``RLIMIT_FSIZE``, inherited by its front ends and workers): the kernel
    refuses a bigger segment as a cgroup at its memory limit would, with an error and no
    signal (Python ignores SIGXFSZ). What a pod at its memory limit looks like to pbd, without
    needing a cgroup of one's own."""

    def __init__(self, *args: Any, limit: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit = limit

    def command(self) -> list[str]:
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            pytest.skip("prlimit (util-linux) is not installed")
        return [prlimit, f"--fsize={self.limit}", "--", *super().command()]


class DaemonFactory:
    """Starts daemons for one test; all of them are stopped and checked at teardown."""

    def __init__(self, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.workdir = workdir
        self.daemons: list[Daemon] = []
        self._stack = stack

    def __call__(self, repository: Path, *args: str, settle: list[str] | None = None) -> Daemon:
        daemon = self._stack.enter_context(
            running_daemon(repository, self.workdir, *args, settle=settle)
        )
        self.daemons.append(daemon)
        return daemon


EXAMPLE_MODEL_NAMES = sorted(
    p.name for p in EXAMPLE_MODELS.iterdir() if p.is_dir() and not p.name.startswith(".")
)
TEST_MODEL_NAMES = sorted(
    p.name for p in TEST_MODELS.iterdir() if p.is_dir() and not p.name.startswith(".")
)
