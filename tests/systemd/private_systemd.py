"""A private systemd, PID 1 of its own PID/mount/UTS/IPC namespaces, for tests and the bench.

The network namespace is the machine's: a daemon that systemd starts in there on 127.0.0.1
is reachable from the test process. Nothing of the machine's own systemd, /run, /tmp or
/var/log is used or changed (see boot_systemd.sh). The namespace ends with its PID 1, which
``stop()`` kills by PID (SIGKILL): every process inside goes with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOOT = HERE / "boot_systemd.sh"
BOOT_TIMEOUT_S = 60.0


def unavailable_reason() -> str | None:
    """Why a private systemd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (unshare of PID and mount namespaces)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/lib/systemd/systemd").exists():
        return "systemd is not installed (/lib/systemd/systemd)"
    probe = subprocess.run(
        ["unshare", "--fork", "--pid", "--mount", "--uts", "--ipc", "--mount-proc", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"unshare is not permitted here: {probe.stderr.strip()}"
    return None


class PrivateSystemd:
    def __init__(self, shared: Path) -> None:
        """``shared``: a directory that appears as /run/pbd-test inside; its units/ are
        installed before boot."""
        self.shared = shared
        self.log_path = shared / "boot.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0  # systemd's PID as seen from here

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    "unshare",
                    "--fork",
                    "--pid",
                    "--mount",
                    "--uts",
                    "--ipc",
                    "--mount-proc",
                    str(BOOT),
                    str(self.shared),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"private systemd exited: {self.log_path.read_text()}")
            if not self.pid:
                self.pid = _child_of(self.proc.pid)
            if self.pid and _comm(self.pid) == "systemd":
                state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return
            time.sleep(0.1)
        raise RuntimeError(f"private systemd did not boot in {BOOT_TIMEOUT_S:g}s")

    def stop(self) -> None:
        """Kill PID 1 of the namespace (and with it everything in there), by its PID."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            if self.proc.poll() is None and not self.pid:
                self.proc.kill()
            self.proc.wait(30)
            self.proc = None

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespaces (as systemd's children see them)."""
        assert self.pid, "not started"
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", *argv],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            input=input,
        )

    def systemctl(
        self, *args: str, check: bool = True, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, check=check, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *args: str) -> str:
        return self.run("journalctl", "--no-pager", "-o", "cat", *args, check=False).stdout

    def host_pid(self, ns_pid: int) -> int:
        """The PID as seen from here of a process that has ``ns_pid`` inside."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("NSpid:"):
                    pids = line.split()[1:]
                    if len(pids) >= 2 and pids[-1] == str(ns_pid) and _in_ns(entry, self.pid):
                        return int(entry.name)
        return 0


def _in_ns(proc: Path, init_pid: int) -> bool:
    try:
        return os.readlink(proc / "ns" / "pid") == os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return False


def _child_of(pid: int) -> int:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return int(children[0]) if children else 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
