"""How connections opened at once spread over pbd's front ends.

    python -m bench.spread [--frontends 4] [--connections 8] [--streams 4] [--runs 6]

Each run starts ``pbd serve --frontends N`` fresh (the identity model of ``bench.cores``),
opens ``--connections`` HTTP/2 connections at once with h2load (Debian's ``nghttp2-client``)
sending gRPC ModelInfer calls for 3 s, ``--streams`` in flight on each (as ``bench.cores``),
and mid-run reads how many of them each front end holds (its sockets matched against
``/proc/<pid>/net/tcp``). One line per run, most loaded first: ``2/2/2/2`` is even. The
busiest front end bounds the rate, so an uneven spread costs what ``bench.cores`` measures
(docs/frontends.md, "Connections spread evenly").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import procstat
from bench.cores import MODEL, PATH, RESULTS, all_pids, grpc_body, idle, repository, role
from bench.servers import start_pbd


def spread(
    python: str, repo: Path, body: Path, fronts: int, connections: int, streams: int
) -> list[int]:
    """The connections each front end held mid-run, most first."""
    server = start_pbd(python, RESULTS, repo, MODEL, f"pbdspread{os.getpid()}",
                       [f"--frontends={fronts}", "--http-port=0"])  # fmt: skip
    try:
        port = int(server.target.rsplit(":", 1)[1])
        idle(server.pid, port)  # the readiness check's connection is gone
        load = subprocess.Popen(
            ["h2load", f"--clients={connections}", f"--max-concurrent-streams={streams}",
             "--duration=3", f"--data={body}",
             "--header=content-type: application/grpc", "--header=te: trailers",
             f"http://{server.target}{PATH}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(1.5)
            fronts_ = [p for p in all_pids(server.pid) if role(p, server.pid) == "front"]
            return sorted((procstat.established(p, port) for p in fronts_), reverse=True)
        finally:
            load.wait(timeout=30)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spread", description=__doc__)
    parser.add_argument("--frontends", type=int, default=4)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--streams", type=int, default=4, help="calls in flight per connection")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pbd")
    opts = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        print("bench.spread needs h2load: apt-get install nghttp2-client", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    even = 0
    with tempfile.TemporaryDirectory(prefix="pbd-bench-spread-") as tmp:
        work = Path(tmp)
        repo = repository(work, 1)
        body = grpc_body(work / "body.grpc")
        for _ in range(opts.runs):
            counts = spread(opts.python, repo, body, opts.frontends, opts.connections, opts.streams)
            even += max(counts) - min(counts) <= 1
            print("/".join(map(str, counts)), flush=True)
    print(f"{even} of {opts.runs} runs as even as can be")
    return 0


if __name__ == "__main__":
    sys.exit(main())
