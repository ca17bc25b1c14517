"""Daemons that share /dev/shm from different PID namespaces (containers with ``--ipc=host``
or a shared /dev/shm volume): none removes a live one's segments, whatever its pid looks like
from where it stands; the segments of one that died are still swept (docs/architecture.md,
"Who owns a segment")."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from pbd_harness import EXAMPLE_MODELS, Daemon, infer_input, make_repository


class NamespacedDaemon(Daemon):
    """A daemon in a PID namespace of its own (where it is pid 1), /dev/shm and the network
    shared with the host, as in a container; ``pid`` is the daemon, not ``unshare``."""

    _inner: int | None = None

    def command(self) -> list[str]:
        unshare = shutil.which("unshare")
        assert unshare is not None
        return [unshare, "--pid", "--fork", "--mount-proc", "--kill-child", *super().command()]

    @property
    def pid(self) -> int:
        if self._inner is None:
            assert self.process is not None
            unshare = self.process.pid
            children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
            assert len(children) == 1, children
            self._inner = int(children[0])
        return self._inner

    def stop(self) -> int:
        # unshare does not pass SIGTERM on: the daemon gets it by its pid.
        if self.process is not None and self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        return super().stop()


def _namespaces_allowed() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a PID namespace needs root and unshare")
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {done.stderr.strip()}")


def add_sub_works(daemon: Daemon) -> None:
    a = np.arange(4, dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
    result = daemon.control().infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def owned_by(daemon: Daemon, daemon_pid: int) -> set[str]:
    """The daemon's files in /dev/shm: its owner record and its segments."""
    return {n for n in daemon.shm_segments() if n.startswith(f"{daemon.shm_prefix}-{daemon_pid}x")}


def test_daemons_in_other_pid_namespaces_keep_their_segments(tmp_path: Path) -> None:
    _namespaces_allowed()
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    prefix = f"pbdns{os.getpid()}"  # one prefix for all: what the sweep looks at
    # Serving the ports themselves: what is counted below is instances' segments (front
    # ends' arenas, and when they go, are test_frontends' business).
    alone = ("--frontends", "1")
    host = Daemon(repository, tmp_path, alone, shm_prefix=prefix)
    contained = NamespacedDaemon(repository, tmp_path, alone, shm_prefix=prefix)
    late = Daemon(repository, tmp_path, alone, shm_prefix=prefix)
    try:
        host.start()
        host.wait_settled(["add_sub"])
        add_sub_works(host)
        host_files = owned_by(host, host.pid)
        assert f"{prefix}-{host.pid}x" in str(host_files) and len(host_files) >= 2

        # Seen from its namespace, the host daemon's pid is not a live process.
        contained.start()
        contained.wait_settled(["add_sub"])
        add_sub_works(contained)
        assert owned_by(host, host.pid) >= host_files, contained.log_tail()
        assert "stale shared-memory" not in contained.log()
        add_sub_works(host)
        contained_files = owned_by(contained, 1)  # pid 1 in its namespace
        assert len(contained_files) >= 2

        # Killed with its namespace (its workers with it): nothing removes its segments...
        # Its workers are stopped first: the daemon's death closes their link before the
        # kernel kills them, and a worker that ran meanwhile would remove its segments (as a
        # worker whose daemon is gone does) and race the count below.
        workers = _children(contained.pid)
        assert workers
        for worker in workers:
            os.kill(worker, signal.SIGSTOP)
        os.kill(contained.pid, signal.SIGKILL)
        assert contained.process is not None
        contained.process.wait(timeout=30)
        assert owned_by(contained, 1) == contained_files

        # ... until a daemon starts: it removes those, and nothing of the live one.
        late.start()
        late.wait_settled(["add_sub"])
        assert owned_by(late, 1) == set(), late.log_tail()
        assert owned_by(host, host.pid) >= host_files
        assert (
            "removed " in late.log()
            and "stale shared-memory segments of dead daemons" in late.log()
        )
        add_sub_works(host)
        add_sub_works(late)
        late_pid = late.pid
        assert late.stop() == 0, late.log_tail()
        assert owned_by(late, late_pid) == set()
        host.assert_clean_exit()  # every file of the prefix is gone
    finally:
        for daemon in (late, contained, host):
            daemon.stop()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (as this namespace sees them)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]
