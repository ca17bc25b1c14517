"""Daemons in different PID namespaces (containers) on one machine: their segments are memfds
their own processes reach through their own /proc, nothing is shared through /dev/shm, and
one that dies leaves nothing behind (docs/architecture.md, "Who owns a segment")."""

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
    """The daemon's segments some process holds (memfds named by the daemon's id)."""
    return {n for n in daemon.shm_segments() if n.startswith(f"{daemon.shm_prefix}-{daemon_pid}x")}


def test_daemons_in_other_pid_namespaces_share_nothing_and_leave_nothing(tmp_path: Path) -> None:
    """Segments are memfds that peers open through /proc/<pid>/fd: inside a PID namespace
    with its own /proc (a container), a daemon's workers reach its segments by the pids
    they see there; two daemons with one prefix share no name and no directory; one killed
    with its namespace leaves nothing held and nothing in /dev/shm, and the other serves on."""
    _namespaces_allowed()
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    prefix = f"pbdns{os.getpid()}"  # one prefix for all
    alone = ("--frontends", "1")
    host = Daemon(repository, tmp_path, alone, shm_prefix=prefix)
    contained = NamespacedDaemon(repository, tmp_path, alone, shm_prefix=prefix)
    try:
        host.start()
        host.wait_settled(["add_sub"])
        add_sub_works(host)
        host_segments = owned_by(host, host.pid)
        assert len(host_segments) >= 2, host.shm_segments()

        contained.start()
        contained.wait_settled(["add_sub"])
        add_sub_works(contained)
        contained_segments = owned_by(contained, 1)  # pid 1 in its namespace
        assert len(contained_segments) >= 2, contained.log_tail()
        assert owned_by(host, host.pid) >= host_segments
        add_sub_works(host)

        # Killed with its namespace (its workers with it): nothing of it is held any more.
        os.kill(contained.pid, signal.SIGKILL)
        assert contained.process is not None
        contained.process.wait(timeout=30)
        assert owned_by(contained, 1) == set()
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        assert owned_by(host, host.pid) >= host_segments
        add_sub_works(host)
        host_pid = host.pid
        assert host.stop() == 0, host.log_tail()
        assert owned_by(host, host_pid) == set()
        host.assert_clean_exit()
    finally:
        for daemon in (contained, host):
            daemon.stop()
