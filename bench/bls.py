"""One BLS hop: a model that calls identity_fp32 against calling identity_fp32 directly, same
daemon, same run.

    python -m bench.bls [--seconds 5] [--elements 16] [--mib 0]

Concurrency 1, gRPC. Reports the mean latency of both paths, the per-hop overhead (the
difference, µs) and the ratio, for a small tensor and, with ``--mib``, a large one too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from bench.servers import ROOT, start_pbd

DIRECT, BLS = "identity_fp32", "bls_identity"


def _mean_us(fn, seconds: float) -> float:  # noqa: ANN001 - a zero-argument callable
    for _ in range(20):
        fn()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def _measure(client: grpcclient.InferenceServerClient, data: np.ndarray, seconds: float) -> str:
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    for model in (DIRECT, BLS):
        if not np.array_equal(client.infer(model, [tensor]).as_numpy("OUTPUT0"), data):
            raise AssertionError(f"{model} did not return its input")
    direct = _mean_us(lambda: client.infer(DIRECT, [tensor]).as_numpy("OUTPUT0"), seconds)
    bls = _mean_us(lambda: client.infer(BLS, [tensor]).as_numpy("OUTPUT0"), seconds)
    return (
        f"{data.nbytes:>10} B  direct {direct:9.1f} µs  via BLS {bls:9.1f} µs  "
        f"per hop {bls - direct:8.1f} µs  ratio {bls / direct:5.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BLS hop against a direct call")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--elements", type=int, default=16, help="FP32 elements, small case")
    parser.add_argument("--mib", type=int, default=0, help="also a tensor of this many MiB")
    args = parser.parse_args(argv)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pbd-bench-bls-") as tmp:
        repository = Path(tmp)
        (repository / BLS).symlink_to(ROOT / "tests" / "integration" / "models" / BLS)
        (repository / DIRECT).symlink_to(ROOT / "examples" / "models" / DIRECT)
        server = start_pbd(
            sys.executable, log_dir, repository, BLS, f"pbdbls{os.getpid()}",
            ["--load-model", DIRECT],
        )  # fmt: skip
        try:
            with grpcclient.InferenceServerClient(server.target) as client:
                rng = np.random.default_rng(0)
                rows = [_measure(client, rng.random((1, args.elements), np.float32), args.seconds)]
                if args.mib:
                    big = rng.random((1, args.mib * 1024 * 1024 // 4), np.float32)
                    rows.append(_measure(client, big, args.seconds))
        finally:
            server.stop()
    print(f"BLS hop (bls_identity -> identity_fp32) vs identity_fp32, concurrency 1, gRPC, "
          f"{args.seconds:g} s each")  # fmt: skip
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
