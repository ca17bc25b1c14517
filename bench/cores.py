"""How the small-request rate grows with pbd's front ends, against Triton's in the same run.

    python -m bench.cores [--frontends 1 2 4 8] [--instances 1 4] [--connections 16]
                          [--streams 4] [--duration 5] [--triton-threads 0]
                          [--protocol grpc|http] [--direct on|off|both] [--json PATH]

The load is h2load's (Debian's ``nghttp2-client``: C, one thread per ``--h2load-threads``), so
the client costs little beside the servers it measures: ``--connections`` HTTP/2 connections,
``--streams`` calls in flight on each, every call the same prebuilt gRPC ModelInfer (FP32
[1,16]) to an identity model with ``--instances`` CPU instances, bounded by ``--duration``
after a one-second warm-up. With ``--protocol http`` the calls are KServe v2 HTTP/REST infer
requests over HTTP/1.1 instead (``h2load --h1``, one call in flight per connection: ``--streams``
does not apply), with the binary tensor data extension as tritonclient.http sends them (a JSON
header, then the input's 64 bytes; the output asked for in binary). Each configuration is one
server started fresh:

- pbd with ``--frontends`` 1 (the daemon serves the ports itself), 2, 4, 8; with front ends,
  ``--direct`` picks the direct path (front ends send requests to the workers: pbd's default),
  the relay through the daemon (``--frontend-direct false``, shown as ``pbd-relay``) or both;
- Triton with its defaults; and, with ``--triton-threads N`` (Triton 2.57 and later: 2.51,
  the release pbd matches, has no such flag and refuses it), ``--grpc-infer-thread-count N``.

Per configuration: calls answered per second, p50/p99 (h2load's per-request log), and the CPU
of every thread of the server and of its children (front ends, workers, Triton's stubs) from
``/proc/<pid>/task/*/stat``, per request: all of them together, the busiest thread (the one
that bounds the rate when cores are plenty), and the busiest data-plane thread: the busiest
outside the processes that run the model (pbd's workers, Triton's stubs), each named with its
process's role (main, front, worker, stub). h2load counts an HTTP 200 as success, and a gRPC
error is a 200 with a status trailer: each run also checks the model's statistics (the
success count must have grown by the calls h2load says succeeded, and nothing failed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient

from bench import procstat
from bench.cpu_split import ThreadSample, threads
from bench.loadgen import build_request, percentile
from bench.servers import ROOT, ServerProcess, free_port, start_pbd, start_triton
from bench.vs_triton import install_triton

MODEL = "identity"
SOURCE = ROOT / "bench" / "models" / "identity_fp32_x2"
RESULTS = ROOT / "bench" / "results"
PATH = "/inference.GRPCInferenceService/ModelInfer"
HTTP_PATH = f"/v2/models/{MODEL}/infer"


@dataclass
class Result:
    server: str  # "pbd" or "triton"
    instances: int
    fronts: int  # pbd: --frontends; Triton: --grpc-infer-thread-count (0: its default)
    infer_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us: float  # every thread of the server and its children, per call
    busiest_us: float  # the busiest thread, per call
    busiest: str  # which thread that was
    # The busiest thread outside the model's own processes (pbd's workers, Triton's stubs): the
    # data plane's (daemon, front ends; Triton's server), which the floor is about.
    plane_us: float
    plane: str
    calls: int
    # Connections each serving process held mid-run (front ends, or the one server), most first.
    spread: list[int]


def repository(root: Path, instances: int) -> Path:
    """The identity model with ``instances`` CPU instances."""
    model = root / f"x{instances}" / MODEL
    shutil.copytree(SOURCE / "1", model / "1")
    config = (SOURCE / "config.pbtxt").read_text()
    config = config.replace('name: "identity_fp32_x2"', f'name: "{MODEL}"')
    config = re.sub(r"count: \d+", f"count: {instances}", config)
    (model / "config.pbtxt").write_text(config)
    return model.parent


def grpc_body(path: Path) -> Path:
    """A file holding one gRPC message: the length-prefixed ModelInferRequest."""
    payload, _data = build_request(MODEL, [1, 16])
    path.write_bytes(b"\0" + len(payload).to_bytes(4, "big") + payload)
    return path


def http_body(path: Path) -> tuple[Path, int]:
    """A file holding one HTTP infer body (binary tensor data extension), and the length of
    its JSON header (``Inference-Header-Content-Length``)."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
        separators=(",", ":"),
    ).encode()
    path.write_bytes(header + bytes(range(64)))
    return path, len(header)


def all_pids(root: int) -> list[int]:
    """``root`` and every process under it (pbd: front ends and workers; Triton: stubs)."""
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue += procstat.children(pid)
    return found


MODEL_ROLES = ("worker", "stub")  # the processes that run the model, not the data plane


def role(pid: int, server_pid: int) -> str:
    """What process ``pid`` is in the server's tree: the server itself (``main``), one of pbd's
    front ends or workers, one of Triton's stubs, or another ``child``."""
    if pid == server_pid:
        return "main"
    line = procstat.command_line(pid)
    for marker, name in (("pbd.fronts.front", "front"), ("pbd_worker", "worker"),
                         ("triton_python_backend_stub", "stub")):  # fmt: skip
        if marker in line:
            return name
    return "child"


def cpu_by_thread(pids: list[int]) -> dict[tuple[int, int], ThreadSample]:
    return {(pid, tid): sample for pid in pids for tid, sample in threads(pid).items()}


def succeeded(target: str) -> tuple[int, int]:
    with grpcclient.InferenceServerClient(target) as client:
        stats = client.get_inference_statistics(MODEL).model_stats[0].inference_stats
        return int(stats.success.count), int(stats.fail.count)


def idle(server_pid: int, port: int, timeout: float = 2.0) -> None:
    """Wait (``timeout`` at most) until no process of the server holds a connection to
    ``port``: the statistics client's, just closed, would otherwise still count in a front
    end's load when h2load connects, and the spread would be uneven by one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(procstat.established(pid, port) for pid in all_pids(server_pid)):
            return
        time.sleep(0.02)


def h2load(
    target: str,
    body: Path,
    log: Path,
    opts: argparse.Namespace,
    spread: Callable[[], None] | None = None,
    http_header: int | None = None,
) -> dict[str, float]:
    """One bounded run; calls done and succeeded, and the latencies of the measured ones.
    ``http_header``: the body is an HTTP infer body with a JSON header that long, sent over
    HTTP/1.1 to ``target`` (its HTTP address); else a gRPC ModelInfer over HTTP/2."""
    argv = [
        "h2load",
        f"--threads={opts.h2load_threads}",
        f"--clients={opts.connections}",
        f"--duration={opts.duration}",
        "--warm-up-time=1",
        f"--data={body}",
        f"--log-file={log}",
    ]
    if http_header is None:
        argv += [
            f"--max-concurrent-streams={opts.streams}",
            "--header=content-type: application/grpc",
            "--header=te: trailers",
            f"http://{target}{PATH}",
        ]
    else:
        argv += [
            "--h1",
            "--header=content-type: application/octet-stream",
            f"--header=inference-header-content-length: {http_header}",
            f"http://{target}{HTTP_PATH}",
        ]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if spread is not None:
            time.sleep(min(1.5, opts.duration / 2 + 1))  # past the warm-up: all connected
            spread()
        stdout, stderr = run.communicate(timeout=opts.duration + 60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    if run.returncode != 0:
        raise RuntimeError(f"h2load failed ({run.returncode}):\n{stdout}\n{stderr}")
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", stdout)
    rate = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", stdout)
    if done is None or rate is None:
        raise RuntimeError(f"h2load's output was not understood:\n{stdout}")
    latencies = sorted(
        int(line.split()[2]) / 1000.0
        for line in log.read_text().splitlines()
        if len(line.split()) >= 3 and line.split()[1] == "200"
    )
    return {
        "done": int(done.group(1)),
        "succeeded": int(done.group(2)),
        "rate": float(rate.group(3)),
        "p50": percentile(latencies, 50) if latencies else math.nan,
        "p99": percentile(latencies, 99) if latencies else math.nan,
    }


def measure(
    server: ServerProcess, label: str, instances: int, fronts: int, work: Path,
    opts: argparse.Namespace,
) -> Result:  # fmt: skip
    http_header: int | None = None
    if opts.protocol == "http":
        body, http_header = http_body(work / "body.http")
        target = f"127.0.0.1:{server.http_port}"
    else:
        body, target = grpc_body(work / "body.grpc"), server.target
    log = work / f"{label}-{instances}-{fronts}.h2load.log"
    before_ok, before_failed = succeeded(server.target)
    port = int(target.rsplit(":", 1)[1])
    idle(server.pid, port)
    pids = all_pids(server.pid)
    before = cpu_by_thread(pids)
    held: list[int] = []

    def look() -> None:  # who holds the connections, mid-run
        counts = [procstat.established(pid, port) for pid in all_pids(server.pid)]
        held.extend(sorted((c for c in counts if c), reverse=True))

    run = h2load(target, body, log, opts, look, http_header)
    after = cpu_by_thread(all_pids(server.pid))
    after_ok, after_failed = succeeded(server.target)
    answered = after_ok - before_ok
    if after_failed != before_failed or answered < run["succeeded"]:
        raise RuntimeError(
            f"{label}: h2load counted {run['succeeded']} answers, the model's statistics "
            f"{answered} successes and {after_failed - before_failed} failures"
        )
    # CPU over the whole run (warm-up included), per call the server answered in that time.
    calls = max(answered, 1)
    spent = {}
    for key, sample in after.items():
        old = before.get(key)
        spent[key] = (sample.cpu_s - (old.cpu_s if old else 0.0), sample.name)
    total = sum(cpu for cpu, _ in spent.values())
    roles = {pid: role(pid, server.pid) for pid, _ in spent}
    (busiest_cpu, busiest_name), busiest_key = max((v, k) for k, v in spent.items())
    (plane_cpu, plane_name), plane_key = max(
        (v, k) for k, v in spent.items() if roles[k[0]] not in MODEL_ROLES
    )
    return Result(
        server=label,
        instances=instances,
        fronts=fronts,
        infer_per_s=run["rate"],
        p50_ms=run["p50"],
        p99_ms=run["p99"],
        cpu_us=total * 1e6 / calls,
        busiest_us=busiest_cpu * 1e6 / calls,
        busiest=f"{busiest_name} ({roles[busiest_key[0]]})",
        plane_us=plane_cpu * 1e6 / calls,
        plane=f"{plane_name} ({roles[plane_key[0]]})",
        calls=answered,
        spread=held,
    )


def table(results: list[Result]) -> str:
    base = {r.instances: r.infer_per_s for r in results if r.server == "triton" and not r.fronts}
    lines = [
        "| server | instances | front ends / threads | infer/s | vs Triton | p50 ms | p99 ms "
        "| CPU µs/call | busiest thread µs/call | busiest data-plane thread µs/call "
        "| connections per process |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in results:
        ratio = r.infer_per_s / base[r.instances] if base.get(r.instances) else math.nan
        fronts = str(r.fronts) if r.fronts or r.server == "pbd" else "default"
        lines.append(
            f"| {r.server} | {r.instances} | {fronts} | {r.infer_per_s:.0f} | {ratio:.2f} "
            f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.cpu_us:.0f} "
            f"| {r.busiest_us:.0f} {r.busiest} | {r.plane_us:.0f} {r.plane} "
            f"| {'/'.join(map(str, r.spread))} |"
        )
    return "\n".join(lines)


def pbd_runs(frontends: list[int], direct: str) -> list[tuple[int, bool]]:
    """(front ends, direct path) of each pbd run: the direct path matters only with front
    ends, so one front end runs once."""
    modes = {"on": [True], "off": [False], "both": [True, False]}[direct]
    return [(f, d) for f in frontends for d in (modes if f > 1 else modes[:1])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cores", description=__doc__)
    parser.add_argument("--frontends", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--streams", type=int, default=4, help="calls in flight per connection")
    parser.add_argument("--duration", type=int, default=5, help="seconds measured")
    parser.add_argument("--h2load-threads", type=int, default=max(1, (os.cpu_count() or 2) // 8))
    parser.add_argument(
        "--triton-threads", type=int, nargs="*", default=[0],
        help="0: Triton's defaults; N: --grpc-infer-thread-count N (Triton 2.57+)",
    )  # fmt: skip
    parser.add_argument(
        "--protocol", choices=("grpc", "http"), default="grpc",
        help="gRPC ModelInfer over HTTP/2, or HTTP/REST infer over HTTP/1.1",
    )  # fmt: skip
    parser.add_argument(
        "--direct", choices=("on", "off", "both"), default="on",
        help="front ends send plain requests straight to workers (on, pbd's default), through "
        "the daemon (off: shown as pbd-relay), or both in turn",
    )  # fmt: skip
    parser.add_argument("--tritonserver", default="", help="Triton's launcher (default: install)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pbd")
    parser.add_argument("--json", type=Path, default=RESULTS / "cores.json")
    opts = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        print("bench.cores needs h2load: apt-get install nghttp2-client", file=sys.stderr)
        return 2
    tritonserver = opts.tritonserver or (install_triton() if opts.triton_threads else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="pbd-bench-cores-") as tmp:
        work = Path(tmp)
        for instances in opts.instances:
            repo = repository(work, instances)
            for threads_ in opts.triton_threads:
                extra = [f"--grpc-infer-thread-count={threads_}"] if threads_ else []
                server = start_triton(tritonserver, RESULTS, repo, MODEL, extra)
                try:
                    results.append(measure(server, "triton", instances, threads_, work, opts))
                finally:
                    server.stop()
                print(table(results).splitlines()[-1], flush=True)
            for fronts, direct in pbd_runs(opts.frontends, opts.direct):
                http_port = free_port()
                server = start_pbd(
                    opts.python, RESULTS, repo, MODEL, f"pbdcores{os.getpid()}",
                    [f"--frontends={fronts}", f"--http-port={http_port}",
                     f"--frontend-direct={'true' if direct else 'false'}"],
                )  # fmt: skip
                server.http_port = http_port
                name = "pbd" if direct or fronts == 1 else "pbd-relay"
                try:
                    results.append(measure(server, name, instances, fronts, work, opts))
                finally:
                    server.stop()
                print(table(results).splitlines()[-1], flush=True)
    print()
    print(table(results))
    opts.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
