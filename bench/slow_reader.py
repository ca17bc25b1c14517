"""A ModelStreamInfer client that sends requests and never reads an answer: what it costs the
server's memory, pbd against Triton 2.51 in the same run.

    python -m bench.slow_reader [--requests 2000] [--floats 262144] [--wait 15]
                                [--frontends 1] [--decoupled] [--json PATH]

The client (grpc's own, from this process) opens one stream to an identity model (FP32, one
CPU instance) and offers ``--requests`` requests of ``--floats`` values each (1 MiB by
default); it reads nothing for ``--wait`` seconds. Reported per server: the requests the
client got out (the server read them, or they fit in HTTP/2 windows), the requests the model
ran (its statistics), and the server's RSS (all its processes) before and after. Then the
call is cancelled and a second client must still be served (exit code 1 otherwise).

With ``--decoupled`` the client sends one request to a decoupled model (``flood_stream``)
that streams ``--requests`` responses of ``--floats`` values, as fast as it can, until the
request is cancelled; after the wait the client reads what comes (the "ran" column counts the
responses it got, and whether the stream ended with an error).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
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
FLOOD = "flood_stream"


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


def measure_decoupled(server: ServerProcess, opts: argparse.Namespace) -> dict[str, object]:
    before = rss_mib(all_pids(server.pid))
    request = service_pb2.ModelInferRequest(model_name=FLOOD)
    for name, value in (("COUNT", opts.requests), ("FLOATS", opts.floats)):
        request.inputs.add(name=name, datatype="INT32", shape=[1])
        request.raw_input_contents.append(np.array([value], np.int32).tobytes())
    reading = threading.Event()

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        yield request
        reading.wait()  # no half-close while the client reads nothing

    channel = grpc.insecure_channel(
        server.target,
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    got, error = 0, ""
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), timeout=opts.wait + 120)
        time.sleep(opts.wait)
        after = rss_mib(all_pids(server.pid))
        for response in call:  # now it reads: what waited, then the end or an error
            if response.error_message:
                error = response.error_message
                break
            got += 1
            if got == opts.requests:
                break
        reading.set()
        call.cancel()
    finally:
        reading.set()
        channel.close()
    with grpcclient.InferenceServerClient(server.target) as other:
        served = other.is_server_live() and other.is_model_ready(FLOOD)
    return {
        "sent": 1,
        "ran": f"{got} responses" + (", then an error" if error else ""),
        "error": error,
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "others_served": bool(served),
    }


def flood_repository(root: Path) -> Path:
    shutil.copytree(ROOT / "bench" / "models" / FLOOD, root / "flood" / FLOOD)
    return root / "flood"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_reader", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--floats", type=int, default=262144, help="FP32 values per request")
    parser.add_argument("--wait", type=float, default=15.0, help="seconds the client reads nothing")
    parser.add_argument("--frontends", type=int, default=1, help="pbd's --frontends")
    parser.add_argument(
        "--decoupled", action="store_true", help="one request to a decoupled model that streams"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "slow_reader.json")
    opts = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pbd-slow-reader-"))
    if opts.decoupled:
        repo, model, run = flood_repository(work), FLOOD, measure_decoupled
    else:
        repo, model, run = repository(work, 1), MODEL, measure
    results: dict[str, dict[str, object]] = {}
    triton = start_triton(install_triton(), work, repo, model, [])
    try:
        results["triton"] = run(triton, opts)
    finally:
        triton.stop()
    pbd = start_pbd(
        sys.executable, work, repo, model, f"pbdslow{os.getpid()}",
        ["--frontends", str(opts.frontends)],
    )  # fmt: skip
    try:
        results["pbd"] = run(pbd, opts)
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
