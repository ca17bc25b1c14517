"""Dynamic batching on against off: throughput of one batching model, same run.

    python -m bench.batching [--clients 16] [--seconds 5] [--execute-ms 5] [--delay-us 2000]
                             [--pbd-arg=--worker-pipeline-depth=1 ...]

``bench/models/batch_sleep`` (each execute() sleeps ``--execute-ms`` once, whatever the number
of requests: a fixed per-call cost) is served twice by one daemon: ``batch_sleep_off`` as is (one
request per execute) and ``batch_sleep_on`` with ``dynamic_batching { max_queue_delay_microseconds:
--delay-us }``. ``--clients`` concurrent gRPC callers drive each for ``--seconds``; every answer
is checked (Y = 2 X). The report gives both throughputs, their ratio (on / off) and the mean
batch the model saw (inference_count / execution_count from the statistics extension). Exit
code 1 if any call failed or any answer was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from bench.servers import ROOT, start_pbd

BASE = "batch_sleep"
METHOD = "/inference.GRPCInferenceService/ModelInfer"


def make_repository(root: Path, execute_ms: float, delay_us: int) -> list[str]:
    """The model twice under ``root``: without and with dynamic batching."""
    source = ROOT / "bench" / "models" / BASE
    names = []
    for suffix, scheduling in (
        ("off", ""),
        ("on", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"),
    ):
        name = f"{BASE}_{suffix}"
        shutil.copytree(source, root / name)
        config = root / name / "config.pbtxt"
        text = config.read_text().replace(f'name: "{BASE}"', f'name: "{name}"')
        text = text.replace('string_value: "5"', f'string_value: "{execute_ms:g}"')
        config.write_text(text + scheduling)
        names.append(name)
    return names


def _request(model: str, value: float) -> bytes:
    msg = pb.ModelInferRequest(model_name=model)
    msg.inputs.add(name="X", datatype="FP32", shape=[1, 4])
    msg.raw_input_contents.append(np.full(4, value, np.float32).tobytes())
    return msg.SerializeToString()


async def _drive(target: str, model: str, clients: int, seconds: float) -> tuple[int, int]:
    """(answers, failures) of ``clients`` callers for ``seconds``."""
    answers = failures = 0
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD)
        end_at = time.monotonic() + seconds

        async def caller(index: int) -> None:
            nonlocal answers, failures
            payload = _request(model, float(index))
            want = np.full(4, 2.0 * index, np.float32)
            while time.monotonic() < end_at:
                try:
                    raw = await call(payload)
                except grpc.RpcError:
                    failures += 1
                    continue
                got = np.frombuffer(pb.ModelInferResponse.FromString(raw).raw_output_contents[0])
                if not np.array_equal(got.view(np.float32), want):
                    failures += 1
                else:
                    answers += 1

        await asyncio.gather(*(caller(i) for i in range(clients)))
    return answers, failures


def _mean_batch(target: str, model: str) -> float:
    with grpcclient.InferenceServerClient(target) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)) / max(int(stats.get("execution_count", 0)), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="dynamic batching on vs off")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--execute-ms", type=float, default=5.0)
    parser.add_argument("--delay-us", type=int, default=2000)
    parser.add_argument(
        "--pbd-arg", action="append", default=[], help="extra `pbd serve` flag (repeatable)"
    )
    args = parser.parse_args(argv)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pbd-bench-batching-") as tmp:
        off, on = make_repository(Path(tmp), args.execute_ms, args.delay_us)
        server = start_pbd(
            sys.executable, log_dir, Path(tmp), off, f"pbdbatch{os.getpid()}",
            ["--load-model", on, *args.pbd_arg], name="pbd-batching",
        )  # fmt: skip
        try:
            rows = {}
            for model in (off, on):
                asyncio.run(_drive(server.target, model, args.clients, 0.5))  # warm-up
                answers, failures = asyncio.run(
                    _drive(server.target, model, args.clients, args.seconds)
                )
                rows[model] = (answers / args.seconds, failures, _mean_batch(server.target, model))
        finally:
            server.stop()
    print(
        f"cores={os.cpu_count()} clients={args.clients} execute={args.execute_ms:g} ms "
        f"max_queue_delay={args.delay_us} us"
    )
    print(f"{'model':16} {'infer/s':>10} {'mean batch':>11} {'failed':>7}")
    for model, (rate, failures, batch) in rows.items():
        print(f"{model:16} {rate:10.1f} {batch:11.2f} {failures:7d}")
    print(f"ratio on/off {rows[on][0] / max(rows[off][0], 1e-9):.2f}")
    return 0 if all(f == 0 for _, f, _ in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
