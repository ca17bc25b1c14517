"""Where a server's CPU goes per request: each thread of the server and of its children.

    python -m bench.cpu_split [--concurrency 8] [--seconds 4] [--elements 16]
                              [--model NAME [--repository DIR]] [--python PATH] [--triton]
                              [--echo [--echo-front-end grpcio|pbd]]

Serves ``identity_fp32`` (pbd, one worker; ``--model`` another of ``--repository``, e.g.
``--model identity_fp32_batch --repository bench/models``), the same model on the real
Triton 2.51 as well (``--triton``: scripts/triton.sh's, measured first), or the bare echo
server (``--echo``, on grpc.aio or pbd.h2), drives the closed-loop load of ``python -m bench``
at ``--concurrency``, and reads ``/proc/<pid>/task/<tid>/stat`` and ``status`` of every thread
before and after the measured window: CPU microseconds and context switches per request, per
thread, and the mean batch the model saw (statistics' inference_count over execution_count in
the window). This is the split the per-request-cost profile in bench/README.md starts from;
``py-spy record -p PID`` on the same processes gives the finer one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient

from bench import procstat
from bench.loadgen import build_request, run_load
from bench.servers import ROOT, ServerProcess, start_echo, start_pbd, start_triton

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


def counts(target: str, model: str) -> tuple[int, int]:
    """The model's (inference_count, execution_count) from its statistics, over gRPC."""
    with grpcclient.InferenceServerClient(target) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return (
        sum(int(s.get("inference_count", 0)) for s in stats),
        sum(int(s.get("execution_count", 0)) for s in stats),
    )


async def measure(server: ServerProcess, opts: argparse.Namespace, name: str) -> None:
    shape = [1, opts.elements]
    payload, data = build_request(opts.model, shape)
    common = {"concurrency": opts.concurrency, "max_requests": 1_000_000}
    await run_load(server.target, payload, shape, data, duration=1.0, warmup=0.3, **common)
    pids = [server.pid, *procstat.children(server.pid)]
    model_counts = None if opts.echo else counts(server.target, opts.model)
    before = {pid: threads(pid) for pid in pids}
    stats = await run_load(
        server.target, payload, shape, data, duration=opts.seconds, warmup=0.0, **common
    )
    batch = ""
    if model_counts is not None:
        inferences, executions = (
            b - a for a, b in zip(model_counts, counts(server.target, opts.model), strict=True)
        )
        batch = f", mean batch {inferences / max(executions, 1):.2f}"
    print(
        f"{name} {opts.model} fp32 {shape} c={opts.concurrency}: "
        f"{stats.infer_per_s:.0f} infer/s, p50 {stats.p50_ms:.2f} ms, p99 {stats.p99_ms:.2f} ms"
        f"{batch}"
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
    parser.add_argument("--model", default=MODEL, help=f"the model to load (default {MODEL})")
    parser.add_argument(
        "--repository", type=Path, default=ROOT / "examples" / "models",
        help="the model repository (default examples/models)",
    )  # fmt: skip
    parser.add_argument(
        "--python", default=sys.executable,
        help="the interpreter pbd runs on (like-for-like with Triton: .venv-system/bin/python)",
    )  # fmt: skip
    parser.add_argument(
        "--triton", action="store_true", help="measure the real Triton first on the same model"
    )
    opts = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if opts.echo:
        server = start_echo(sys.executable, RESULTS, front_end=opts.echo_front_end)
        try:
            asyncio.run(measure(server, opts, "echo"))
        finally:
            server.stop()
        return 0
    if opts.triton:
        from bench.vs_triton import install_triton

        triton = start_triton(install_triton(), RESULTS, opts.repository, opts.model, [])
        try:
            asyncio.run(measure(triton, opts, "triton"))
        finally:
            triton.stop()
    prefix = f"pbdsplit{os.getpid()}"
    server = start_pbd(opts.python, RESULTS, opts.repository, opts.model, prefix, opts.pbd_arg)
    try:
        asyncio.run(measure(server, opts, "pbd"))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
