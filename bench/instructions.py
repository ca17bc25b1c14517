"""Instructions per small call: pbd's user-space cost of a request, counted, not timed.

    python -m bench.instructions [--requests 2000] [--connections 1] [--streams 8]
                                 [--instances 1] [--frontends 1] [--children]
                                 [--http] [--base REV]

Timing a change on a shared 2-core machine moves by 5-10 % from one window to the next
(``bench.trees`` needs many rounds to see 3 %). An instruction count does not: ``pbd serve``
runs under valgrind's callgrind with instrumentation off, takes ``--warmup`` calls (h2load,
the gRPC ModelInfer of ``bench.cores``: FP32 [1,16] to an identity model), then its counters
are zeroed, instrumentation turned on for exactly ``--requests`` calls, and dumped (``--http``:
the same call as KServe v2 HTTP infer with the binary tensor extension, ``bench.cores``'s HTTP
body, over HTTP/1.1: one call in flight per connection, so ``--connections`` is the number in
flight and ``--streams`` does not apply). Reported:
instructions per call of the daemon (and, with ``--children``, of each worker and front end,
which then run under callgrind too: slower to start). The same tree gives the same count to
about 0.2 % run after run, whatever else the machine does.

What it leaves out: the kernel (system calls: send, recv, epoll), waiting, and what an
instruction costs (cache misses, branch mispredictions); ``bench.cores`` and
``bench.vs_triton`` measure time. ``--base REV`` measures that commit's tree too (checked out
into a temporary git worktree, as ``bench.trees`` does) and prints head/base per process: what
a change to the request path buys, in one run. Fewer instructions need not mean less time
(bench/README.md, "Fourth step": mypyc gave 17 % fewer in the daemon and no less time):
time a change that the count favours before keeping it. Needs valgrind and h2load (Debian's
``valgrind`` and ``nghttp2-client``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cores import HTTP_PATH, MODEL, PATH, all_pids, grpc_body, http_body, repository, role
from bench.servers import ROOT, free_port, start_pbd
from bench.trees import drop_worktree, tree_path, worktree

RESULTS = ROOT / "bench" / "results"


@dataclass
class Count:
    """One process's instructions over the measured calls."""

    role: str  # main, front, worker
    pid: int
    instructions: int


def totals(dump: Path) -> int:
    """The instruction total of a callgrind dump (its ``summary:`` or ``totals:`` line)."""
    with dump.open() as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"{dump}: no summary or totals line (not a callgrind dump?)")


def wrapper(where: Path, out: Path, children: bool) -> Path:
    """An executable that runs the venv's Python under callgrind, instrumentation off."""
    script = where / "callgrind-python"
    script.write_text(
        "#!/bin/sh\n"
        f"exec valgrind --tool=callgrind --instr-atstart=no "
        f"--trace-children={'yes' if children else 'no'} "
        f'--callgrind-out-file={out}/callgrind.%p {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return script


def h2load(target: str, load: Load, opts: argparse.Namespace, calls: int) -> None:
    """Exactly ``calls`` calls; RuntimeError unless every one succeeded."""
    done = subprocess.run(
        ["h2load", f"--clients={opts.connections}", f"--requests={calls}",
         f"--data={load.body}", *load.flags, load.url(target)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if f"{calls} succeeded" not in done.stdout:
        raise RuntimeError(f"h2load: not every call succeeded:\n{done.stdout}\n{done.stderr}")


@dataclass
class Load:
    """What h2load sends: the body file, its flags, and where (the gRPC or the HTTP port)."""

    body: Path
    flags: list[str]
    http_port: int = 0  # 0: the gRPC call

    def url(self, grpc_target: str) -> str:
        if self.http_port:
            return f"http://127.0.0.1:{self.http_port}{HTTP_PATH}"
        return f"http://{grpc_target}{PATH}"


def load_of(work: Path, opts: argparse.Namespace) -> Load:
    if not opts.http:
        flags = [f"--max-concurrent-streams={opts.streams}",
                 "--header=content-type: application/grpc", "--header=te: trailers"]  # fmt: skip
        return Load(grpc_body(work / "body.grpc"), flags)
    body, header_length = http_body(work / "body.http")
    flags = ["--h1", "--header=content-type: application/octet-stream",
             f"--header=inference-header-content-length: {header_length}"]  # fmt: skip
    return Load(body, flags, free_port())


def control(action: list[str], pids: list[int]) -> None:
    for pid in pids:
        subprocess.run(["callgrind_control", *action, str(pid)], check=True, capture_output=True)


def measure(
    label: str, env: dict[str, str] | None, work: Path, load: Load, opts: argparse.Namespace
) -> list[Count]:
    """Start a daemon of the tree ``env`` names, count ``--requests`` calls, stop it."""
    out = work / f"callgrind-{label}"
    out.mkdir()
    python = wrapper(work, out, opts.children)
    repo = work / "repository"
    args = [f"--frontends={opts.frontends}"]
    if load.http_port:
        args.append(f"--http-port={load.http_port}")  # after start_pbd's 0: this one holds
    server = start_pbd(
        str(python), RESULTS, repo, MODEL, f"pbdinstr{os.getpid()}{label}", args,
        timeout=600, env=env, name=f"instructions-{label}",
    )  # fmt: skip
    try:
        h2load(server.target, load, opts, opts.warmup)
        roles = {pid: role(pid, server.pid) for pid in all_pids(server.pid)}
        traced = [pid for pid in roles if opts.children or pid == server.pid]
        control(["-z"], traced)
        control(["-i", "on"], traced)
        h2load(server.target, load, opts, opts.requests)
        control(["-d", label], traced)
        control(["-i", "off"], traced)
    finally:
        server.stop()
    counts = []
    for pid in traced:
        dumps = sorted(out.glob(f"callgrind.{pid}.*"))
        if not dumps:
            raise RuntimeError(f"no callgrind dump for process {pid} ({roles[pid]})")
        counts.append(Count(roles[pid], pid, totals(dumps[0])))
    return sorted(counts, key=lambda c: (c.role != "main", c.role, c.pid))


def report(name: str, counts: list[Count], requests: int) -> None:
    for count in counts:
        print(f"{name:5s} {count.role:7s} {count.pid:>8d} {count.instructions / requests:12,.0f}")
    total = sum(c.instructions for c in counts)
    print(f"{name:5s} {'all':7s} {'':>8s} {total / requests:12,.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="calls counted")
    parser.add_argument("--warmup", type=int, default=300, help="calls before counting")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--streams", type=int, default=8, help="calls in flight per connection")
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--frontends", type=int, default=1)
    parser.add_argument(
        "--children", action="store_true", help="count the workers and front ends too"
    )
    parser.add_argument(
        "--http", action="store_true", help="KServe v2 HTTP infer (HTTP/1.1) instead of gRPC"
    )
    parser.add_argument("--base", help="a commit to count beside this tree (git rev)")
    opts = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "h2load"):
        if shutil.which(tool) is None:
            print(f"bench.instructions needs {tool}: apt-get install valgrind nghttp2-client",
                  file=sys.stderr)  # fmt: skip
            return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pbd-instructions-") as scratch:
        work = Path(scratch)
        repository(work, opts.instances).rename(work / "repository")
        load = load_of(work, opts)
        trees: list[tuple[str, dict[str, str] | None]] = [("head", None)]
        base: Path | None = None
        try:
            if opts.base:
                base = worktree(opts.base, work)
                trees.insert(0, ("base", {**os.environ, "PYTHONPATH": tree_path(base)}))
            results = {name: measure(name, env, work, load, opts) for name, env in trees}
        except ValueError as exc:
            print(f"bench.instructions: {exc}", file=sys.stderr)
            return 2
        finally:
            if base is not None:
                drop_worktree(base)
    flight = "HTTP/1.1, 1" if opts.http else str(opts.streams)
    print(
        f"{MODEL} FP32 [1,16], {opts.connections} connection(s) x {flight} in flight, "
        f"{opts.instances} instance(s), --frontends {opts.frontends}: instructions per call "
        f"over {opts.requests} calls"
    )
    print(f"{'tree':5s} {'process':7s} {'pid':>8s} {'per call':>12s}")
    for name, counts in results.items():
        report(name, counts, opts.requests)
    if "base" in results:
        by_role = {name: _by_role(counts) for name, counts in results.items()}
        for key in by_role["head"]:
            if key in by_role["base"]:
                ratio = by_role["head"][key] / by_role["base"][key]
                print(f"head/base {key:7s} {ratio:.4f}")
    print(f"took {time.monotonic() - began:.0f} s")
    return 0


def _by_role(counts: list[Count]) -> dict[str, int]:
    """Instructions by role (workers and front ends summed), and all of them."""
    out: dict[str, int] = {}
    for count in counts:
        out[count.role] = out.get(count.role, 0) + count.instructions
    out["all"] = sum(c.instructions for c in counts)
    return out


if __name__ == "__main__":
    sys.exit(main())
