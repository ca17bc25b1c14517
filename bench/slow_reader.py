"""A ModelStreamInfer client that sends requests and never reads an answer: what it costs the
server's memory, pbd against Triton 2.51 in the same run.

    python -m bench.slow_reader [--requests 2000] [--floats 262144] [--wait 15]
                                [--frontends 1] [--json PATH]

The client (grpc's own, from this process) opens one stream to an identity model (FP32, one
CPU instance) and offers ``--requests`` requests of ``--floats`` values each (1 MiB by
default); it reads nothing for ``--wait`` seconds. Reported per server: the requests the
client got out (the server read them, or they fit in HTTP/2 windows), the requests the model
ran (its statistics), and the server's RSS (all its processes) before and after. Then the
call is cancelled and a second client must still be served (exit code 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from bench import procstat
from bench.cores import MODEL, all_pids, repository
from bench.servers import ROOT, ServerProcess, start_pbd, start_triton
from bench.vs_triton import install_triton

RESULTS = ROOT / "bench" / "results"


def rss_mib(pids: list[int]) -> float:
    return sum(procstat.status_kib(pid) or 0 for pid in pids) / 1024


def ran(target: str) -> int:
    with grpcclient.InferenceServerClient(target) as client:
        stats = client.get_inference_statistics(MODEL).model_stats[0].inference_stats
        return int(stats.success.count)


def measure(server: ServerProcess, opts: argparse.Namespace) -> dict[str, object]:
    before = rss_mib(all_pids(server.pid))
    sent = 0
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, opts.floats])
    request.raw_input_contents.append(np.zeros(opts.floats, np.float32).tobytes())

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        nonlocal sent
        for _ in range(opts.requests):
            sent += 1  # grpc's sending thread; read by the main thread after the wait
            yield request

    channel = grpc.insecure_channel(
        server.target,
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    try:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        time.sleep(opts.wait)
        after = rss_mib(all_pids(server.pid))
        executed = ran(server.target)
        call.cancel()
    finally:
        channel.close()
    with grpcclient.InferenceServerClient(server.target) as other:
        served = other.is_server_live() and other.is_model_ready(MODEL)
    return {
        "sent": sent,
        "ran": executed,
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "others_served": bool(served),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_reader", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--floats", type=int, default=262144, help="FP32 values per request")
    parser.add_argument("--wait", type=float, default=15.0, help="seconds the client reads nothing")
    parser.add_argument("--frontends", type=int, default=1, help="pbd's --frontends")
    parser.add_argument("--json", type=Path, default=RESULTS / "slow_reader.json")
    opts = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pbd-slow-reader-"))
    repo = repository(work, 1)
    results: dict[str, dict[str, object]] = {}
    triton = start_triton(install_triton(), work, repo, MODEL, [])
    try:
        results["triton"] = measure(triton, opts)
    finally:
        triton.stop()
    pbd = start_pbd(
        sys.executable, work, repo, MODEL, f"pbdslow{os.getpid()}",
        ["--frontends", str(opts.frontends)],
    )  # fmt: skip
    try:
        results["pbd"] = measure(pbd, opts)
    finally:
        pbd.stop()
    print("| server | requests sent | requests ran | RSS before MiB | RSS after MiB "
          "| others served |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|")
    for name, r in results.items():
        print(f"| {name} | {r['sent']} | {r['ran']} | {r['rss_before_mib']} "
              f"| {r['rss_after_mib']} | {r['others_served']} |")  # fmt: skip
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps({"options": vars(opts) | {"json": str(opts.json)},
                                     "results": results}, indent=2))  # fmt: skip
    return 0 if all(r["others_served"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
