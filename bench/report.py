"""Medians over repeats, the table printed on stdout, and the JSON document."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass, field

from bench.loadgen import LoadStats

SERVERS = ("echo", "pbd")
# Above this share of all CPUs' time taken by the hypervisor (steal) or by processes other
# than the client and the server under test, a row says so: its numbers are noisy.
NOISE_NOTE = 0.10


@dataclass(frozen=True)
class Scenario:
    name: str
    shape: list[int]
    concurrency: int


@dataclass
class ScenarioResult:
    scenario: Scenario
    runs: dict[str, list[LoadStats]] = field(default_factory=lambda: {s: [] for s in SERVERS})

    def median(self, server: str, attr: str) -> float:
        values = [getattr(run, attr) for run in self.runs[server]]
        return statistics.median(values) if values else math.nan

    def cpu_us_per_infer(self, server: str, clock: str = "server") -> float:
        """Median CPU microseconds per completed call on one clock (``server``, ``client``)."""
        values = [
            run.cpu_s.get(clock, math.nan) / run.requests * 1e6
            for run in self.runs[server]
            if run.requests
        ]
        return statistics.median(values) if values else math.nan

    def machine_share(self, server: str, clock: str) -> float:
        """Median fraction of all CPUs' time that a clock took during the runs. ``other`` is the
        machine's busy time not spent by the client or the server under test."""
        cpus = os.cpu_count() or 1
        values = [
            _clock(run, clock) / (run.window_s * cpus)
            for run in self.runs[server]
            if run.window_s > 0
        ]
        return statistics.median(values) if values else math.nan

    @property
    def ratio(self) -> float:
        """pbd's throughput over the echo server's: the headline number."""
        echo, pbd = self.median("echo", "infer_per_s"), self.median("pbd", "infer_per_s")
        return pbd / echo if echo > 0 else math.nan

    @property
    def cpu_ratio(self) -> float:
        """pbd's server CPU per infer over the echo server's: steadier on a shared machine."""
        echo, pbd = self.cpu_us_per_infer("echo"), self.cpu_us_per_infer("pbd")
        return pbd / echo if echo > 0 else math.nan

    @property
    def valid(self) -> bool:
        return all(run.valid for runs in self.runs.values() for run in runs)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            **asdict(self.scenario),
            "ratio_pbd_over_echo": self.ratio,
            "cpu_ratio_pbd_over_echo": self.cpu_ratio,
        }
        for server in SERVERS:
            if self.runs[server]:
                out[server] = {
                    "infer_per_s": self.median(server, "infer_per_s"),
                    "p50_ms": self.median(server, "p50_ms"),
                    "p99_ms": self.median(server, "p99_ms"),
                    "server_cpu_us_per_infer": self.cpu_us_per_infer(server),
                    "client_cpu_us_per_infer": self.cpu_us_per_infer(server, "client"),
                    "machine_busy_share": self.machine_share(server, "machine_busy"),
                    "machine_steal_share": self.machine_share(server, "machine_steal"),
                    "machine_other_share": self.machine_share(server, "other"),
                    "errors": sum(run.errors for run in self.runs[server]),
                    "mismatches": sum(run.mismatches for run in self.runs[server]),
                    "runs": [asdict(run) for run in self.runs[server]],
                }
        return out


def _clock(run: LoadStats, clock: str) -> float:
    if clock == "other":
        ours = run.cpu_s.get("client", math.nan) + run.cpu_s.get("server", math.nan)
        return run.cpu_s.get("machine_busy", math.nan) - ours
    return run.cpu_s.get(clock, math.nan)


def _num(value: float, width: int, digits: int = 0) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:>{width}.{digits}f}"


TABLE_HEAD = (
    f"{'scenario':<18}{'conc':>5} |{'echo/s':>8}{'p50':>7}{'p99':>7}{'cpu':>6} |"
    f"{'pbd/s':>8}{'p50':>7}{'p99':>7}{'cpu':>6} |{'pbd/echo':>9}{'cpu x':>7}  note"
)
TABLE_FOOT = (
    "infer/s, p50/p99 latency (ms): medians over repeats; cpu: server CPU µs per infer"
    " (daemon + workers for pbd);\npbd/echo: throughput ratio; cpu x: pbd's CPU per infer"
    " over echo's"
)


def format_row(res: ScenarioResult) -> str:
    cells = [f"{res.scenario.name:<18}{res.scenario.concurrency:>5} |"]
    for server in SERVERS:
        cells.append(
            _num(res.median(server, "infer_per_s"), 8)
            + _num(res.median(server, "p50_ms"), 7, 2)
            + _num(res.median(server, "p99_ms"), 7, 2)
            + _num(res.cpu_us_per_infer(server), 6)
            + " |"
        )
    cells.append(_num(res.ratio, 9, 2) + _num(res.cpu_ratio, 7, 2))
    return "".join(cells) + "  " + _note(res)


def _note(res: ScenarioResult) -> str:
    notes = []
    for server in SERVERS:
        runs = res.runs[server]
        errors = sum(run.errors for run in runs)
        mismatches = sum(run.mismatches for run in runs)
        if errors:
            first = next(run.first_error for run in runs if run.first_error)
            notes.append(f"{server}: {errors} errors ({first})")
        if mismatches:
            notes.append(f"{server}: {mismatches} WRONG ANSWERS")
        if any(run.capped for run in runs):
            notes.append(f"{server}: hit --max-requests")
        steal = res.machine_share(server, "machine_steal")
        other = res.machine_share(server, "other")
        if steal > NOISE_NOTE:
            notes.append(f"{server}: {steal:.0%} of CPU stolen by the host")
        if other > NOISE_NOTE:
            notes.append(f"{server}: {other:.0%} of CPU used by other processes")
    return "; ".join(notes)


def format_memory(memory: dict[str, object]) -> str:
    lines = []
    for key, value in memory.items():
        if isinstance(value, int):
            lines.append(f"  {key:<24}{value / 1024:8.1f} MiB")
        elif isinstance(value, dict):
            per = ", ".join(f"pid {pid}: {kib / 1024:.1f} MiB" for pid, kib in value.items())
            lines.append(f"  {key:<24}{per or '-'}")
        else:
            lines.append(f"  {key:<24}{value}")
    return "\n".join(lines)
