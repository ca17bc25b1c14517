"""pbd against pbd: this tree against another commit, the same model and load, in one run.

    python -m bench.trees --base REV [--concurrency 1] [--rounds 8] [--seconds 3]
                          [--elements 16] [--python PY]

What a change to the request path buys, measured the way ``bench.vs_triton`` measures pbd
against Triton: both daemons up side by side (``REV`` checked out into a temporary git
worktree and put first on ``PYTHONPATH``, so its daemon and its workers import that tree; the
other one runs this tree), serving ``identity_fp32`` at ``--concurrency`` in flight. Their
windows alternate (base then head on even rounds, head then base on odd ones), each after a
0.5 s warm-up of its own, so drift on a shared machine hits both. Reported: the medians of
infer/s, p50, p99 and server CPU per request (daemon and workers), and each round's head/base
ratios. Exit code 0 when every call of every window was answered right, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import procstat
from bench.loadgen import LoadStats, build_request, run_load
from bench.servers import ROOT, ServerProcess, start_pbd

MODEL = "identity_fp32"
RESULTS = ROOT / "bench" / "results"
SOURCES = ("service", "workers", "protos")  # what pbd, pbd_worker and pbd_wire import from


def tree_path(tree: Path) -> str:
    """``PYTHONPATH`` that makes a Python import pbd from ``tree`` rather than this checkout."""
    return os.pathsep.join(str(tree / part) for part in SOURCES)


def worktree(rev: str, where: Path) -> Path:
    """``rev`` checked out (detached) under ``where``; ValueError if git cannot."""
    path = where / "base"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(path), rev],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise ValueError(f"git worktree add {rev}: {done.stderr.strip()}")
    return path


def python_path(pid: int) -> str | None:
    """``PYTHONPATH`` in the environment ``pid`` was started with (None: unset, or gone)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"PYTHONPATH="):
            return entry.split(b"=", 1)[1].decode()
    return None


def check_base(server: ServerProcess, base: Path) -> None:
    """The base daemon and each of its workers import the base tree; RuntimeError if not."""
    wanted = tree_path(base)
    for pid in [server.pid, *procstat.children(server.pid)]:
        if python_path(pid) != wanted:
            raise RuntimeError(f"process {pid} of the base daemon does not import {base}")


def drop_worktree(path: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
        capture_output=True,
    )


async def window(server: ServerProcess, opts: argparse.Namespace) -> tuple[LoadStats, float]:
    """One measured window: its stats and the server's CPU µs per request (workers too)."""
    shape = [1, opts.elements]
    payload, data = build_request(MODEL, shape)
    common = {"concurrency": opts.concurrency, "max_requests": 1_000_000}
    await run_load(server.target, payload, shape, data, duration=0.5, warmup=0.0, **common)
    began = procstat.tree_cpu_seconds(server.pid)
    stats = await run_load(
        server.target, payload, shape, data, duration=opts.seconds, warmup=0.0, **common
    )
    spent = procstat.tree_cpu_seconds(server.pid) - began
    return stats, spent * 1e6 / max(stats.requests, 1)


async def compare(servers: dict[str, ServerProcess], opts: argparse.Namespace) -> bool:
    rows: dict[str, list[tuple[LoadStats, float]]] = {name: [] for name in servers}
    for round_ in range(opts.rounds):
        order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
        for name in order:
            rows[name].append(await window(servers[name], opts))
    print(
        f"{MODEL} fp32 [1,{opts.elements}], {opts.concurrency} in flight, "
        f"{opts.rounds} windows of {opts.seconds:g} s each"
    )
    print(f"{'':6s} {'infer/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} {'CPU µs':>7s}")
    for name, runs in rows.items():
        print(
            f"{name:6s} {statistics.median(s.infer_per_s for s, _ in runs):8.0f} "
            f"{statistics.median(s.p50_ms for s, _ in runs):7.2f} "
            f"{statistics.median(s.p99_ms for s, _ in runs):7.2f} "
            f"{statistics.median(cpu for _, cpu in runs):7.0f}"
        )
    pairs = list(zip(rows["base"], rows["head"], strict=True))
    for label, ratio in (
        ("infer/s", lambda b, h: h[0].infer_per_s / b[0].infer_per_s),
        ("p50", lambda b, h: h[0].p50_ms / b[0].p50_ms),
        ("p99", lambda b, h: h[0].p99_ms / b[0].p99_ms),
        ("CPU", lambda b, h: h[1] / b[1]),
    ):
        each = [ratio(b, h) for b, h in pairs]
        print(
            f"head/base {label:8s} median {statistics.median(each):5.3f}  rounds "
            + " ".join(f"{r:.3f}" for r in each)
        )
    return all(s.valid for runs in rows.values() for s, _ in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trees", description=__doc__)
    parser.add_argument("--base", required=True, help="the commit to compare with (git rev)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds a window")
    parser.add_argument("--elements", type=int, default=16, help="FP32 elements per request")
    parser.add_argument("--python", default=sys.executable, help="interpreter of both daemons")
    opts = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    repository = ROOT / "examples" / "models"
    servers: dict[str, ServerProcess] = {}
    with tempfile.TemporaryDirectory(prefix="pbd-trees-") as scratch:
        base = worktree(opts.base, Path(scratch))
        try:
            for name, env in (("base", {"PYTHONPATH": tree_path(base)}), ("head", None)):
                prefix = f"pbdtrees{os.getpid()}{name}"
                servers[name] = start_pbd(
                    opts.python, RESULTS, repository, MODEL, prefix, [], env=env,
                    name=f"trees-{name}",
                )  # fmt: skip
            check_base(servers["base"], base)
            right = asyncio.run(compare(servers, opts))
        finally:
            for server in servers.values():
                server.stop()
            drop_worktree(base)
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
