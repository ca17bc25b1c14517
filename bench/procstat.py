"""Memory and CPU of a server process and its children, read from ``/proc``.

Children are the processes whose parent is the server (pbd's model workers); the echo server
has none. RSS is ``VmRSS`` and the lifetime peak ``VmHWM`` from ``/proc/<pid>/status``, in KiB.
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` from field 3 (state) on; None if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    return text.rsplit(")", 1)[1].split()


def status_kib(pid: int, key: str = "VmRSS") -> int | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return sorted(found)


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks after boot): tells a live PID from a reused one."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process so far; 0 if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_seconds() -> tuple[float, float]:
    """All CPUs together since boot, from ``/proc/stat``: (busy, stolen by the hypervisor)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / TICKS, steal / TICKS


def cpu_model() -> str:
    """The first CPU's model name from ``/proc/cpuinfo``."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_runtime(pid: int) -> str:
    """The Python runtime ``pid`` runs on: the ``libpython`` it mapped (an embedding such as
    Triton's stub, or an interpreter built with ``--enable-shared``), else its executable."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if "/libpython3" in path:
                    return path
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return ""


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and of its children that are alive now."""
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children(pid))


class PeakSampler(threading.Thread):
    """Samples the RSS of a process and of its children every ``interval`` seconds.

    The sampler runs in the load generator's process, so it is kept cheap: the list of
    children (a scan of all of ``/proc``) is refreshed only every ``rescan`` samples.
    """

    def __init__(self, pid: int, interval: float = 0.2, rescan: int = 10) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.pid = pid
        self.interval = interval
        self.rescan = rescan
        self.peak_kib = 0
        self.children_peak_kib: dict[int, int] = {}
        self._children: list[int] = []
        self._samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        if self._samples % self.rescan == 0:
            self._children = children(self.pid)
        self._samples += 1
        self.peak_kib = max(self.peak_kib, status_kib(self.pid) or 0)
        for child in self._children:
            rss = status_kib(child) or 0
            self.children_peak_kib[child] = max(self.children_peak_kib.get(child, 0), rss)

    def stop(self) -> None:
        self._done.set()
        self.join(5)
        self.sample()


def established(pid: int, port: int) -> int:
    """TCP connections to local ``port`` that process ``pid`` holds (its descriptors' socket
    inodes, matched against the established connections of ``/proc/<pid>/net/tcp[6]``)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):  # grpc core serves IPv4 on IPv6 sockets (mapped addresses)
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and local_port == port and fields[9] in inodes:
                    count += 1
    return count
