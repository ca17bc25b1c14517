"""Run the benchmark: every scenario against the echo ceiling and against pbd, in one run.

    python -m bench [--quick] [--only echo|pbd] [--repeat N] [--json PATH] [--pbd-arg=--flag]

Per scenario and repeat the two servers take turns (echo first on even repeats, pbd first on
odd ones) so that drift of the machine touches both; the result is pbd's throughput as a
fraction of the echo server's, medians over repeats. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import grpc

from bench import procstat
from bench.loadgen import LoadStats, ResponseMismatch, build_request, run_load
from bench.report import (
    TABLE_FOOT,
    TABLE_HEAD,
    Scenario,
    ScenarioResult,
    format_memory,
    format_row,
)
from bench.servers import (
    ROOT,
    ServerProcess,
    kill_leftovers,
    leftover_segments,
    start_echo,
    start_pbd,
)
from pbd.memory.malloc import describe

MODEL = "identity_fp32"
SCENARIOS = [
    Scenario("fp32 [1,16]", [1, 16], 1),
    Scenario("fp32 [1,16]", [1, 16], 8),
    Scenario("fp32 [1,262144]", [1, 262144], 1),
    Scenario("fp32 [1,262144]", [1, 262144], 8),
]
RESULTS = ROOT / "bench" / "results"
# Another load than the gRPC one: (server name, CPU clocks) -> one measured window.
Load = Callable[[str, Mapping[str, Callable[[], float]]], Awaitable[LoadStats]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="pbd against a bare gRPC echo server, same run"
    )
    add_common_args(parser, RESULTS / "latest.json")
    add = parser.add_argument
    add("--only", choices=["echo", "pbd"], help="measure one server only")
    add("--no-malloc-tuning", action="store_true", help="echo server keeps glibc's defaults")
    add("--model-repository", type=Path, default=ROOT / "examples" / "models")
    return check_common_args(parser, parser.parse_args(argv))


def add_common_args(parser: argparse.ArgumentParser, json_path: Path) -> None:
    """The options every same-run comparison takes (``bench``, ``bench.vs_triton``)."""
    add = parser.add_argument
    add("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    add("--warmup", type=float, default=1.0, help="unmeasured seconds before each run (default 1)")
    add("--repeat", type=int, default=1, help="runs per scenario and server; medians are kept")
    add("--max-requests", type=int, default=200_000, help="hard cap on requests per run")
    add("--quick", action="store_true", help="duration 1 s, warm-up 0.3 s (for tests)")
    add("--pbd-arg", action="append", default=[], metavar="FLAG", help="extra `pbd serve` flag")
    add("--python", default=sys.executable, help="interpreter for the Python servers")
    add("--json", type=Path, default=json_path, help="where to write the results")


def check_common_args(
    parser: argparse.ArgumentParser, opts: argparse.Namespace
) -> argparse.Namespace:
    """``--quick`` applied and the bounds checked; ``opts`` back."""
    if opts.quick:
        opts.duration, opts.warmup = 1.0, 0.3
    if opts.repeat < 1 or opts.duration <= 0 or opts.warmup < 0 or opts.max_requests < 1:
        parser.error("--repeat and --max-requests must be >= 1, --duration > 0, --warmup >= 0")
    return opts


def common_header(opts: argparse.Namespace) -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": procstat.cpu_model(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "malloc_tuning": describe(),
        "duration_s": opts.duration,
        "warmup_s": opts.warmup,
        "repeat": opts.repeat,
        "max_requests": opts.max_requests,
        "pbd_args": opts.pbd_arg,
    }


def header(opts: argparse.Namespace) -> dict[str, object]:
    return {**common_header(opts), "echo_malloc_tuning": not opts.no_malloc_tuning}


@contextlib.contextmanager
def servers(
    opts: argparse.Namespace, finish: dict[str, object]
) -> Iterator[dict[str, ServerProcess]]:
    """The servers to measure, started; on exit stopped by PID, how that went put in ``finish``."""
    started: dict[str, ServerProcess] = {}
    shm_prefix = f"pbdbench{os.getpid()}"
    try:
        if opts.only != "pbd":
            started["echo"] = start_echo(opts.python, RESULTS, not opts.no_malloc_tuning)
        if opts.only != "echo":
            started["pbd"] = start_pbd(
                opts.python, RESULTS, opts.model_repository, MODEL, shm_prefix, opts.pbd_arg
            )
        yield started
    finally:
        workers: dict[int, int | None] = {}
        if "pbd" in started:
            workers = {w: procstat.start_ticks(w) for w in procstat.children(started["pbd"].pid)}
        for name, server in started.items():
            finish[f"{name}_exit_code"] = server.stop()
        if "pbd" in started:
            finish["pbd_workers_left"] = kill_leftovers(workers)
            finish["pbd_shm_left"] = leftover_segments(shm_prefix)


async def measure(
    opts: argparse.Namespace, started: dict[str, ServerProcess]
) -> list[ScenarioResult]:
    results = []
    print(f"{TABLE_HEAD}\n{'-' * len(TABLE_HEAD)}", flush=True)
    for scenario in SCENARIOS:
        result = ScenarioResult(scenario)
        payload, data = build_request(MODEL, scenario.shape)
        await measure_scenario(opts, started, result, payload, data)
        results.append(result)
        print(format_row(result), flush=True)
    print(TABLE_FOOT)
    return results


async def measure_scenario(
    opts: argparse.Namespace,
    started: dict[str, ServerProcess],
    result: ScenarioResult,
    payload: bytes,
    data: bytes,
    check: Callable[[bytes], None] | None = None,
    before_run: Callable[[str], None] | None = None,
    load: Load | None = None,
) -> None:
    """``opts.repeat`` runs of ``payload`` on each started server of ``result.servers``, added
    to ``result``. The servers take turns: in ``result.servers`` order on even repeats, reversed
    on odd ones, so drift of the machine touches both. Server CPU is the process and its
    children. ``check`` is run_load's answer check; ``before_run(server name)`` is called
    before each run. A wrong first answer or a transport failure raises RuntimeError."""
    scenario = result.scenario
    for repeat in range(opts.repeat):
        order = result.servers if repeat % 2 == 0 else result.servers[::-1]
        for name in (n for n in order if n in started):
            pid = started[name].pid
            if before_run is not None:
                before_run(name)
            clocks: dict[str, Callable[[], float]] = {
                "server": lambda pid=pid: procstat.tree_cpu_seconds(pid),
                # The server's main process alone (pbd's daemon: the control plane).
                "main": lambda pid=pid: procstat.cpu_seconds(pid),
                "machine_busy": lambda: procstat.machine_seconds()[0],
                "machine_steal": lambda: procstat.machine_seconds()[1],
            }
            try:
                if load is not None:
                    stats = await load(name, clocks)
                else:
                    stats = await run_load(
                        started[name].target,
                        payload,
                        scenario.shape,
                        data,
                        concurrency=scenario.concurrency,
                        duration=opts.duration,
                        warmup=opts.warmup,
                        max_requests=opts.max_requests,
                        clocks=clocks,
                        check=check,
                    )
            except (ResponseMismatch, grpc.RpcError, TimeoutError) as exc:
                raise RuntimeError(f"{name}, {scenario.name}: {exc!r}") from exc
            result.runs[name].append(stats)


def idle_memory(started: dict[str, ServerProcess]) -> dict[str, object]:
    memory: dict[str, object] = {}
    if "echo" in started:
        memory["echo_idle_kib"] = procstat.status_kib(started["echo"].pid) or 0
    if "pbd" in started:
        pid = started["pbd"].pid
        memory["pbd_daemon_idle_kib"] = procstat.status_kib(pid) or 0
        memory["pbd_workers_idle_kib"] = {
            w: procstat.status_kib(w) or 0 for w in procstat.children(pid)
        }
    return memory


def after_memory(
    started: dict[str, ServerProcess], sampler: procstat.PeakSampler | None
) -> dict[str, object]:
    memory: dict[str, object] = {}
    if "echo" in started:
        memory["echo_hwm_kib"] = procstat.status_kib(started["echo"].pid, "VmHWM") or 0
    if "pbd" in started and sampler is not None:
        pid = started["pbd"].pid
        sampler.stop()
        memory["pbd_daemon_peak_kib"] = sampler.peak_kib
        memory["pbd_daemon_hwm_kib"] = procstat.status_kib(pid, "VmHWM") or 0
        memory["pbd_daemon_after_kib"] = procstat.status_kib(pid) or 0
        memory["pbd_workers_peak_kib"] = sampler.children_peak_kib
        memory["pbd_workers_hwm_kib"] = {
            w: procstat.status_kib(w, "VmHWM") or 0 for w in procstat.children(pid)
        }
    return memory


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    info = header(opts)
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    finish: dict[str, object] = {}
    try:
        with servers(opts, finish) as started:
            time.sleep(1.0)  # let both settle before the idle reading
            memory = idle_memory(started)
            sampler = None
            if "pbd" in started:
                sampler = procstat.PeakSampler(started["pbd"].pid)
                sampler.start()
            results = asyncio.run(measure(opts, started))
            memory.update(after_memory(started, sampler))
    except RuntimeError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print("memory (RSS):")
    print(format_memory(memory))
    print("shutdown:", " ".join(f"{k}={v}" for k, v in finish.items()))
    document = {
        "header": info,
        "scenarios": [r.summary() for r in results],
        "memory_kib": memory,
        "shutdown": finish,
    }
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"wrote {opts.json}")
    clean = finish.get("pbd_exit_code", 0) == 0 and not finish.get("pbd_workers_left")
    return 0 if clean and all(r.valid for r in results) else 1
