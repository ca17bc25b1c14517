"""Throughput with tracing at 100% sampling against tracing off, same run.

    python -m bench.tracing [--duration 5] [--warmup 1] [--repeat 2]

Two daemons serve identity_fp32 side by side: one as shipped (trace level OFF), one with
``--trace-config level=TIMESTAMPS --trace-config rate=1`` exporting every span through the
batch span processor and the OTLP gRPC exporter to a local receiver (``bench.otlp_receiver``,
its own process). They take turns per scenario and repeat (off first on even repeats); the
result is traced throughput as a fraction of untraced, medians over repeats, and the loss in
percent, and the CPU microseconds per infer of the daemon and its workers plus the OTLP
receiver (``cpu x``: traced over untraced; steadier than throughput on a shared machine),
and where the extra CPU goes: the daemon process, its workers, its span exporter process
(``pbd.tracing.export_process``) and the receiver.
The receiver's span count is checked against the requests sent (8 spans each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys

from bench import procstat
from bench.loadgen import build_request, run_load
from bench.servers import ROOT, ServerProcess, free_port, start_pbd

MODEL = "identity_fp32"
SCENARIOS = [([1, 16], 1), ([1, 16], 8)]
PARTS = ("daemon", "workers", "exporter", "receiver")  # where traced requests spend more CPU
SPANS_PER_REQUEST = 7  # server, queue, compute, input_copy, execute, output_copy, response


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    port = free_port()
    receiver = ServerProcess(
        "otlp-receiver",
        [sys.executable, "-m", "bench.otlp_receiver", str(port)],
        port,
        log_dir / "otlp-receiver.log",
    )
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
    }
    repository = ROOT / "examples" / "models"
    servers: dict[str, ServerProcess] = {}
    sent_traced = 0
    failed = 0
    try:
        servers["off"] = start_pbd(
            sys.executable, log_dir, repository, MODEL, f"pbdtroff{os.getpid()}", [], name="pbd-off"
        )
        servers["on"] = start_pbd(
            sys.executable, log_dir, repository, MODEL, f"pbdtron{os.getpid()}",
            ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"],
            env=env, name="pbd-traced",
        )  # fmt: skip
        print(f"{'scenario':20} {'off/s':>8} {'traced/s':>9} {'traced/off':>10} {'loss':>6}"
              f" {'off cpu':>8} {'on cpu':>8} {'cpu x':>6}")  # fmt: skip
        for shape, conc in SCENARIOS:
            payload, data = build_request(MODEL, shape)
            rates: dict[str, list[float]] = {"off": [], "on": []}
            cpus: dict[str, list[float]] = {"off": [], "on": []}
            parts: dict[str, dict[str, list[float]]] = {
                w: {p: [] for p in PARTS} for w in ("off", "on")
            }
            for rep in range(args.repeat):
                for which in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    pid = servers[which].pid
                    kids = procstat.children(pid)
                    exporters = [k for k in kids if "export_process" in procstat.command_line(k)]
                    workers = [k for k in kids if k not in exporters]
                    clocks = {
                        "server": lambda pid=pid: procstat.tree_cpu_seconds(pid),
                        "receiver": lambda: procstat.tree_cpu_seconds(receiver.pid),
                        "daemon": lambda pid=pid: procstat.cpu_seconds(pid),
                        "workers": lambda ks=workers: sum(map(procstat.cpu_seconds, ks)),
                        "exporter": lambda ks=exporters: sum(map(procstat.cpu_seconds, ks)),
                    }
                    stats = asyncio.run(
                        run_load(servers[which].target, payload, shape, data,
                                 concurrency=conc, duration=args.duration, warmup=args.warmup,
                                 clocks=clocks)
                    )  # fmt: skip
                    failed += stats.errors + stats.mismatches
                    rates[which].append(stats.infer_per_s)
                    cpu = stats.cpu_s.get("server", 0.0) + stats.cpu_s.get("receiver", 0.0)
                    cpus[which].append(1e6 * cpu / max(stats.requests, 1))
                    for part in PARTS:
                        parts[which][part].append(
                            1e6 * stats.cpu_s.get(part, 0.0) / max(stats.requests, 1)
                        )
                    if which == "on":
                        sent_traced += stats.requests
            off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
            label = f"fp32 {shape} c={conc}"
            off_cpu, on_cpu = statistics.median(cpus["off"]), statistics.median(cpus["on"])
            print(f"{label:20} {off:8.0f} {on:9.0f} {on / off:10.3f} {100 * (1 - on / off):5.1f}%"
                  f" {off_cpu:8.0f} {on_cpu:8.0f} {on_cpu / max(off_cpu, 1):6.2f}")  # fmt: skip
            extra = {
                p: statistics.median(parts["on"][p]) - statistics.median(parts["off"][p])
                for p in PARTS
            }
            print("  tracing's CPU per infer (us), traced minus off: "
                  + ", ".join(f"{p} {v:+.0f}" for p, v in extra.items()))  # fmt: skip
    finally:
        for server in servers.values():
            server.stop()
        receiver.stop()
    counted = receiver.log_path.read_text().strip().splitlines()[-1:]
    print(f"receiver: {counted[0] if counted else 'no count'}; traced requests measured "
          f"{sent_traced} (x{SPANS_PER_REQUEST} spans, plus warm-up)")  # fmt: skip
    print(f"errors: {failed}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
