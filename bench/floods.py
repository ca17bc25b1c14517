"""HTTP/2 floods against pbd and Triton in one run, each beside a legitimate client.

    python -m bench.floods [--seconds 10] [--only TEXT] [--idle 2000] [--no-triton]
                           [--json PATH]

For each server (pbd, then Triton 2.51 as ``scripts/triton.sh`` installs it), serving
``identity_fp32``: the legitimate client alone, then each flood of ``bench.attacks`` for
``--seconds`` from a process of its own, with the legitimate client beside it. The legitimate
client starts a small ModelInfer call ([1,4] FP32) every 20 ms, each with a 5 s deadline, and
checks every answer; a call that fails or times out is an error. A server that answered none
of a window's calls is restarted before the next flood (the table says so). Reported per
flood and server: the legitimate calls' p50 and p99 latency and errors, the server's CPU
during the flood, and what the flood met (connections it needed, the server's GOAWAY codes).

Before the floods, memory per idle connection: ``--idle`` connections are opened and held
(after the HTTP/2 handshake, then bare TCP without a preface), and the server process's RSS
growth is divided by their number; bare ones are held ``--slow-seconds`` to see which server
closes them.

The machine is shared: the load average at the start and end of each window is printed, and
the numbers to read are the same-run comparisons. Exit code 0 when pbd's legitimate calls
met the floor during every flood (p99 <= 25 ms, no error) and its idle connections cost at
most 32 KiB each; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from bench import procstat
from bench.attacks import FLOODS
from bench.loadgen import MODEL_INFER, build_request, check_response, percentile
from bench.servers import ROOT, ServerProcess, start_pbd, start_triton
from bench.vs_triton import install_triton

MODEL = "identity_fp32"
SHAPE = [1, 4]
INTERVAL_S = 0.02
CALL_TIMEOUT_S = 5.0
FLOOR_P99_MS = 25.0
FLOOR_IDLE_KIB = 32.0
RESULTS = ROOT / "bench" / "results"


@dataclass
class Window:
    server: str
    flood: str
    calls: int = 0
    errors: int = 0
    first_error: str = ""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    cpu_s: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    attack: dict[str, object] = field(default_factory=dict)
    restarted: bool = False  # every call failed: the server was restarted after the window


async def legitimate(target: str, seconds: float, window: Window) -> None:
    """A call every INTERVAL_S for ``seconds``, whatever the previous ones are doing."""
    payload, data = build_request(MODEL, SHAPE)
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(MODEL_INFER)

        async def one() -> None:
            began = time.perf_counter()
            try:
                check_response(await call(payload, timeout=CALL_TIMEOUT_S), SHAPE, data)
            except (grpc.RpcError, AssertionError) as exc:
                window.errors += 1
                window.first_error = window.first_error or str(exc)[:200]
                return
            latencies.append((time.perf_counter() - began) * 1000)

        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        while loop.time() < start + seconds:
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(max(0.0, start + len(tasks) * INTERVAL_S - loop.time()))
        await asyncio.gather(*tasks)
    window.calls = len(tasks)
    ordered = sorted(latencies)
    window.p50_ms = percentile(ordered, 50) if ordered else float("nan")
    window.p99_ms = percentile(ordered, 99) if ordered else float("nan")


def measure(server: ServerProcess, flood: str, seconds: float) -> Window:
    window = Window(server.name, flood)
    began_load = os.getloadavg()[0]
    cpu = procstat.tree_cpu_seconds(server.pid)
    attacker = None
    if flood != "none":
        attacker = subprocess.Popen(
            [sys.executable, "-m", "bench.attacks", flood, server.target, str(seconds)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert attacker.stdout is not None
        # {"ready": true}: the flood proper starts (a server that takes nothing may keep it)
        select.select([attacker.stdout], [], [], 30)
        cpu = procstat.tree_cpu_seconds(server.pid)
    try:
        asyncio.run(legitimate(server.target, seconds, window))
    finally:
        if attacker is not None:
            try:
                out, _ = attacker.communicate(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                attacker.kill()
                out, _ = attacker.communicate()
            lines = [line for line in out.splitlines() if line.startswith('{"flood"')]
            window.attack = json.loads(lines[-1]) if lines else {"flood": flood, "stuck": True}
    window.cpu_s = procstat.tree_cpu_seconds(server.pid) - cpu
    window.load = (began_load, os.getloadavg()[0])
    time.sleep(1.5)  # closed connections linger (GOAWAY, then close) before the next window
    return window


@dataclass
class Idle:
    server: str
    count: int
    handshaken_kib: float
    bare_kib: float
    bare_closed: int
    held_s: float


def _hold(server: ServerProcess, count: int, raw: bool, seconds: float) -> tuple[float, int]:
    """RSS growth per connection (KiB) while ``count`` are held, and how many the server
    closed within ``seconds``."""
    before = procstat.status_kib(server.pid) or 0
    argv = [sys.executable, "-m", "bench.attacks", "idle", server.target, str(count)]
    holder = subprocess.Popen(
        argv + (["--raw"] if raw else []),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    opened = json.loads(holder.stdout.readline())["open"]
    time.sleep(2.0)
    after = procstat.status_kib(server.pid) or 0
    time.sleep(max(0.0, seconds - 2.0))
    holder.stdin.close()
    closed = json.loads(holder.stdout.readline())["closed_by_server"]
    holder.wait(timeout=30)
    time.sleep(2.0)
    return (after - before) / max(opened, 1), int(closed)


def idle(server: ServerProcess, count: int, slow_seconds: float) -> Idle:
    handshaken, _ = _hold(server, count, raw=False, seconds=2.0)
    bare, closed = _hold(server, count, raw=True, seconds=slow_seconds)
    return Idle(server.name, count, handshaken, bare, closed, slow_seconds)


def table(windows: list[Window], servers: list[str]) -> str:
    by = {(w.server, w.flood): w for w in windows}
    floods = list(dict.fromkeys(w.flood for w in windows))
    head = "| flood |" + "".join(
        f" {s} p50 ms | {s} p99 ms | {s} errors | {s} CPU s | {s}: flood met |" for s in servers
    )
    lines = [head, "|---|" + "---|" * 5 * len(servers)]
    for flood in floods:
        row = f"| {flood} |"
        for s in servers:
            w = by.get((s, flood))
            if w is None:
                row += " | | | | |"
                continue
            met = ""
            if w.attack:
                goaways = w.attack.get("goaways") or {}
                assert isinstance(goaways, dict)
                codes = ", ".join(f"{k} ×{v}" for k, v in sorted(goaways.items())) or "no GOAWAY"
                met = f"{w.attack['connections']} conn., {codes}"
            if w.restarted:
                met += "; served nothing more: restarted"
            row += (
                f" {w.p50_ms:.2f} | {w.p99_ms:.2f} | {w.errors}/{w.calls} | {w.cpu_s:.1f} | {met} |"
            )
        lines.append(row)
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.floods", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="each flood's window")
    parser.add_argument("--only", action="append", default=[], help="floods whose name has TEXT")
    parser.add_argument("--idle", type=int, default=2000, help="idle connections (0: skip)")
    parser.add_argument(
        "--slow-seconds", type=float, default=12.0, help="how long bare TCP connections are held"
    )
    parser.add_argument("--no-triton", action="store_true", help="pbd alone")
    parser.add_argument("--tritonserver", help="Triton launcher (default: scripts/triton.sh's)")
    parser.add_argument("--json", type=Path, help="write every window's numbers here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    floods = ["none"] + [n for n in FLOODS if not opts.only or any(t in n for t in opts.only)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    repository = ROOT / "examples" / "models"
    prefix = f"pbdfloods{os.getpid()}"
    starters: dict[str, Callable[[], ServerProcess]] = {
        "pbd": lambda: start_pbd(sys.executable, RESULTS, repository, MODEL, prefix, [])
    }
    if not opts.no_triton:
        tritonserver = opts.tritonserver or install_triton()
        starters["triton"] = lambda: start_triton(tritonserver, RESULTS, repository, MODEL, [])
    windows: list[Window] = []
    idles: list[Idle] = []
    for start in starters.values():
        server = start()
        try:
            # Idle connections first: memory the floods' connections freed would hide theirs.
            asyncio.run(legitimate(server.target, 1.0, Window(server.name, "warm-up")))
            if opts.idle:
                idles.append(idle(server, opts.idle, opts.slow_seconds))
                print(idles[-1], flush=True)
            for flood in floods:
                window = measure(server, flood, opts.seconds)
                windows.append(window)
                print(
                    f"{server.name:6s} {flood:26s} p50 {window.p50_ms:7.2f} ms  "
                    f"p99 {window.p99_ms:8.2f} ms  errors {window.errors}/{window.calls}  "
                    f"CPU {window.cpu_s:5.1f} s  load {window.load[0]:.1f}→{window.load[1]:.1f}  "
                    f"{window.attack}",
                    flush=True,
                )
                if window.calls and window.errors == window.calls:  # it serves no more
                    window.restarted = True
                    server.stop()
                    server = start()
        finally:
            server.stop()
    print()
    print(f"{procstat.cpu_model()}, {os.cpu_count()} CPUs; load average {os.getloadavg()}")
    print(table(windows, list(starters)))
    for row in idles:
        print(
            f"{row.server}: {row.count} idle connections, {row.handshaken_kib:.1f} KiB each "
            f"after the HTTP/2 handshake, {row.bare_kib:.1f} KiB bare TCP; "
            f"{row.bare_closed} of the bare ones closed by the server within {row.held_s:g} s"
        )
    if opts.json:
        opts.json.write_text(
            json.dumps(
                {"windows": [asdict(w) for w in windows], "idle": [asdict(i) for i in idles]}
            )
        )
    pbd = [w for w in windows if w.server == "pbd" and w.flood != "none"]
    floor = all(w.p99_ms <= FLOOR_P99_MS and not w.errors for w in pbd)
    memory = all(i.handshaken_kib <= FLOOR_IDLE_KIB for i in idles if i.server == "pbd")
    if pbd:
        print(
            f"pbd floor (p99 <= {FLOOR_P99_MS:g} ms, no errors, during every flood): "
            f"{'met' if floor else 'NOT met'}; median p99 "
            f"{statistics.median(w.p99_ms for w in pbd):.2f} ms"
        )
    return 0 if floor and memory else 1


if __name__ == "__main__":
    sys.exit(main())
