"""Where a server's CPU goes per request: each thread of the server and of its children.

    python -m bench.cpu_split [--concurrency 8] [--seconds 4] [--elements 16]
                              [--echo [--echo-front-end grpcio|pbd]]

Serves ``identity_fp32`` (pbd, one worker) or the bare echo server (``--echo``, on grpc.aio
or pbd.h2), drives the closed-loop load of ``python -m bench`` at ``--concurrency``, and reads
``/proc/<pid>/task/<tid>/stat`` and ``status`` of every thread before and after the measured
window: CPU microseconds and context switches per request, per thread. This is the split the
per-request-cost profile in bench/README.md starts from; ``perf record -p PID`` and
``py-spy record -p PID`` on the same processes give the finer one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import procstat
from bench.loadgen import build_request, run_load
from bench.servers import ROOT, ServerProcess, start_echo, start_pbd

MODEL = "identity_fp32"
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class ThreadSample:
    name: str
    cpu_s: float
    switches: int


def threads(pid: int) -> dict[int, ThreadSample]:
    """Every thread of ``pid``: name, CPU seconds, voluntary + involuntary context switches."""
    out: dict[int, ThreadSample] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        base = Path(f"/proc/{pid}/task/{tid}")
        try:
            stat = (base / "stat").read_text().rsplit(")", 1)[1].split()
            name = (base / "comm").read_text().strip()
            status = (base / "status").read_text()
        except OSError:
            continue
        switches = sum(
            int(line.split()[1])
            for line in status.splitlines()
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
        )
        cpu = (int(stat[11]) + int(stat[12])) / procstat.TICKS
        out[tid] = ThreadSample(name, cpu, switches)
    return out


def report(pids: list[int], before: dict[int, dict[int, ThreadSample]], requests: int) -> None:
    for pid in pids:
        after = threads(pid)
        total = 0.0
        role = "server" if pid == pids[0] else "child"
        for tid, sample in sorted(after.items()):
            old = before.get(pid, {}).get(tid, ThreadSample(sample.name, 0.0, 0))
            cpu = sample.cpu_s - old.cpu_s
            switches = sample.switches - old.switches
            total += cpu
            if cpu > 0 or switches:
                print(
                    f"  {role} {pid} {sample.name:16s} {cpu * 1e6 / requests:7.0f} us/req "
                    f"{switches / requests:6.2f} switches/req"
                )
        print(f"  {role} {pid} {'all threads':16s} {total * 1e6 / requests:7.0f} us/req")


async def measure(server: ServerProcess, opts: argparse.Namespace) -> None:
    shape = [1, opts.elements]
    payload, data = build_request(MODEL, shape)
    common = {"concurrency": opts.concurrency, "max_requests": 1_000_000}
    await run_load(server.target, payload, shape, data, duration=1.0, warmup=0.3, **common)
    pids = [server.pid, *procstat.children(server.pid)]
    before = {pid: threads(pid) for pid in pids}
    stats = await run_load(
        server.target, payload, shape, data, duration=opts.seconds, warmup=0.0, **common
    )
    print(
        f"{'echo' if opts.echo else 'pbd'} fp32 {shape} c={opts.concurrency}: "
        f"{stats.infer_per_s:.0f} infer/s, p50 {stats.p50_ms:.2f} ms, p99 {stats.p99_ms:.2f} ms"
    )
    report(pids, before, max(stats.requests, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--elements", type=int, default=16, help="FP32 elements per request")
    parser.add_argument("--echo", action="store_true", help="the bare echo server")
    parser.add_argument(
        "--echo-front-end", choices=("grpcio", "pbd"), default="grpcio",
        help="the echo server's gRPC server: grpc.aio's or pbd's own HTTP/2",
    )  # fmt: skip
    parser.add_argument("--pbd-arg", action="append", default=[], metavar="FLAG")
    opts = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if opts.echo:
        server = start_echo(sys.executable, RESULTS, front_end=opts.echo_front_end)
    else:
        prefix = f"pbdsplit{os.getpid()}"
        server = start_pbd(
            sys.executable, RESULTS, ROOT / "examples" / "models", MODEL, prefix, opts.pbd_arg
        )
    try:
        asyncio.run(measure(server, opts))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
