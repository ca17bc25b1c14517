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
    """One scenario's runs on two servers: ``servers`` is (baseline, subject), and the ratios
    are the subject's over the baseline's (pbd over echo in ``python -m bench``)."""

    scenario: Scenario
    runs: dict[str, list[LoadStats]] = field(default_factory=dict)
    servers: tuple[str, str] = SERVERS

    def __post_init__(self) -> None:
        for server in self.servers:
            self.runs.setdefault(server, [])

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
        """The subject's throughput over the baseline's (pbd over echo): the headline number."""
        base, subject = (self.median(s, "infer_per_s") for s in self.servers)
        return subject / base if base > 0 else math.nan

    @property
    def paired_ratio(self) -> float:
        """The median of the per-repeat ratios: run i of one server and run i of the other ran
        back to back, so each ratio sees the same stretch of a shared host, where the ratio of
        medians can set a run in a slow stretch against one in a fast one."""
        base, subject = (self.runs[s] for s in self.servers)
        pairs = zip(base, subject, strict=False)  # a failed run ends the shorter list early
        ratios = [b.infer_per_s / a.infer_per_s for a, b in pairs if a.infer_per_s > 0]
        return statistics.median(ratios) if ratios else math.nan

    @property
    def cpu_ratio(self) -> float:
        """The subject's server CPU per infer over the baseline's: steadier on a shared machine."""
        base, subject = (self.cpu_us_per_infer(s) for s in self.servers)
        return subject / base if base > 0 else math.nan

    @property
    def valid(self) -> bool:
        return all(run.valid for runs in self.runs.values() for run in runs)

    def summary(self) -> dict[str, object]:
        base, subject = self.servers
        out: dict[str, object] = {
            **asdict(self.scenario),
            f"ratio_{subject}_over_{base}": self.ratio,
            f"paired_ratio_{subject}_over_{base}": self.paired_ratio,
            f"cpu_ratio_{subject}_over_{base}": self.cpu_ratio,
        }
        for server in self.servers:
            if self.runs[server]:
                out[server] = {
                    "infer_per_s": self.median(server, "infer_per_s"),
                    "p50_ms": self.median(server, "p50_ms"),
                    "p99_ms": self.median(server, "p99_ms"),
                    "server_cpu_us_per_infer": self.cpu_us_per_infer(server),
                    "client_cpu_us_per_infer": self.cpu_us_per_infer(server, "client"),
                    "main_process_cpu_us_per_infer": self.cpu_us_per_infer(server, "main"),
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


def _rate_width(server: str) -> int:
    return max(8, len(server) + 3)


def _ratio_width(servers: tuple[str, str]) -> int:
    return max(9, len(servers[0]) + len(servers[1]) + 2)


def table_head(servers: tuple[str, str] = SERVERS) -> str:
    cells = [f"{'scenario':<18}{'conc':>5} |"]
    for server in servers:
        cells.append(f"{server + '/s':>{_rate_width(server)}}{'p50':>7}{'p99':>7}{'cpu':>6} |")
    ratio = f"{servers[1]}/{servers[0]}"
    return "".join(cells) + f"{ratio:>{_ratio_width(servers)}}{'cpu x':>7}  note"


TABLE_HEAD = table_head()
TABLE_FOOT = (
    "infer/s, p50/p99 latency (ms): medians over repeats; cpu: server CPU µs per infer"
    " (daemon + workers for pbd);\npbd/echo: throughput ratio; cpu x: pbd's CPU per infer"
    " over echo's"
)


def format_row(res: ScenarioResult) -> str:
    cells = [f"{res.scenario.name:<18}{res.scenario.concurrency:>5} |"]
    for server in res.servers:
        cells.append(
            _num(res.median(server, "infer_per_s"), _rate_width(server))
            + _num(res.median(server, "p50_ms"), 7, 2)
            + _num(res.median(server, "p99_ms"), 7, 2)
            + _num(res.cpu_us_per_infer(server), 6)
            + " |"
        )
    cells.append(_num(res.ratio, _ratio_width(res.servers), 2) + _num(res.cpu_ratio, 7, 2))
    return "".join(cells) + "  " + _note(res)


def _note(res: ScenarioResult) -> str:
    notes = []
    for server in res.servers:
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
    width = max([24, *(len(key) + 2 for key in memory)])
    for key, value in memory.items():
        if isinstance(value, int):
            lines.append(f"  {key:<{width}}{value / 1024:8.1f} MiB")
        elif isinstance(value, dict):
            per = ", ".join(f"pid {pid}: {kib / 1024:.1f} MiB" for pid, kib in value.items())
            lines.append(f"  {key:<{width}}{per or '-'}")
        else:
            lines.append(f"  {key:<{width}}{value}")
    return "\n".join(lines)
