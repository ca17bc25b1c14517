"""Triton's CPU metrics: ``nv_cpu_utilization`` and ``nv_cpu_memory_{total,used}_bytes``.

Read from /proc as Triton reads them: utilization is the busy share of all cores' time between
two readings of the ``cpu`` line of /proc/stat (idle and iowait count as idle; guest time is
already inside user and nice); used memory is MemTotal minus MemAvailable from /proc/meminfo.
Where /proc cannot be read (not Linux) the families are absent, as in Triton.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.metrics_core import Metric

# user nice system idle iowait irq softirq steal: the fields of the cpu line that sum to
# the time elapsed (guest and guest_nice are counted in user and nice already).
_STAT_FIELDS = 8
_IDLE, _IOWAIT = 3, 4


def read_cpu_times(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the text of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1 : 1 + _STAT_FIELDS]]
            idle = values[_IDLE] + (values[_IOWAIT] if len(values) > _IOWAIT else 0)
            total = sum(values)
            return total - idle, total
    raise ValueError("/proc/stat has no 'cpu' line")


def read_memory(text: str) -> tuple[int, int]:
    """(total, used) bytes from the text of /proc/meminfo."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    total = fields["MemTotal"]
    return total, total - fields.get("MemAvailable", fields.get("MemFree", 0))


class CpuMetrics:
    """A collector; each scrape reports the utilization since the previous one."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self._last = self._times()

    def _times(self) -> tuple[int, int] | None:
        try:
            return read_cpu_times((self.proc / "stat").read_text())
        except (OSError, ValueError):
            return None

    def collect(self) -> Iterator[Metric]:
        now = self._times()
        if now is not None:
            last, self._last = self._last or (0, 0), now
            busy, total = now[0] - last[0], now[1] - last[1]
            utilization = Metric("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
            utilization.add_sample("nv_cpu_utilization", {}, busy / total if total > 0 else 0.0)
            yield utilization
        try:
            memory_total, used = read_memory((self.proc / "meminfo").read_text())
        except (OSError, ValueError, KeyError):
            return
        for name, help_text, value in (
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", memory_total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", used),
        ):
            family = Metric(name, help_text, "gauge")
            family.add_sample(name, {}, value)
            yield family
