"""Scaling scenario: a step in load against a model whose execute sleeps.

    python -m bench.scaling [--delay-ms 50] [--before 3] [--after 6] [--clients 4]

One client for ``--before`` seconds, then ``--clients`` for ``--after`` seconds, against
``bench/models/sleep_autoscale`` (autoscaled, min 1; KIND_CPU, so the ceiling is also capped
at the machine's cores). Each answer names the worker PID that served it, so the report gives
the time from the step to the first answer from a new instance, throughput before the step
and after the new instance served, and the number of failed requests (should be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from bench.servers import ROOT, start_pbd

MODEL = "sleep_autoscale"
METHOD = "/inference.GRPCInferenceService/ModelInfer"


def _request(delay_ms: int) -> bytes:
    msg = pb.ModelInferRequest(model_name=MODEL)
    msg.inputs.add(name="DELAY_MS", datatype="INT32", shape=[1])
    msg.raw_input_contents.append(np.array([delay_ms], np.int32).tobytes())
    return msg.SerializeToString()


async def _drive(target: str, args: argparse.Namespace) -> dict[str, float]:
    payload = _request(args.delay_ms)
    answers: list[tuple[float, int]] = []  # (completion time, pid)
    errors = 0
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD)
        start = time.monotonic()
        step_at = start + args.before
        end_at = step_at + args.after

        async def client(begin: float) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, begin - time.monotonic()))
            while time.monotonic() < end_at:
                try:
                    raw = await call(payload)
                except grpc.RpcError:
                    errors += 1
                    continue
                pid = int(
                    np.frombuffer(
                        pb.ModelInferResponse.FromString(raw).raw_output_contents[0], np.int64
                    )[0]
                )
                answers.append((time.monotonic(), pid))

        await asyncio.gather(client(start), *(client(step_at) for _ in range(args.clients - 1)))
    first_pid = answers[0][1]
    before = [t for t, _ in answers if t < step_at]
    new = [t for t, pid in answers if pid != first_pid and t >= step_at]
    first_new = min(new) if new else float("nan")
    after = [t for t, _ in answers if new and t >= first_new]
    return {
        "step_to_first_new_instance_answer_s": first_new - step_at,
        "throughput_before_per_s": len(before) / args.before,
        "throughput_after_per_s": len(after) / max(end_at - first_new, 1e-9) if new else 0.0,
        "instances_seen": float(len({pid for _, pid in answers})),
        "requests": float(len(answers)),
        "errors": float(errors),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pbd scaling scenario (step load)")
    parser.add_argument("--delay-ms", type=int, default=50)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--after", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    server = start_pbd(
        sys.executable, log_dir, ROOT / "bench" / "models", MODEL, f"pbdscale{os.getpid()}", []
    )
    try:
        result = asyncio.run(_drive(server.target, args))
    finally:
        server.stop()
    print(f"cores={os.cpu_count()} delay={args.delay_ms} ms clients 1 -> {args.clients}")
    for key, value in result.items():
        print(f"{key:38} {value:10.3f}")
    return 0 if result["errors"] == 0 and result["instances_seen"] > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
