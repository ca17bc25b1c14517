"""16 MiB FP32 identity through system shared memory against plain gRPC, same daemon, same run.

    python -m bench.shm [--seconds 5] [--mib 16]

Reports infer/s for both paths, the shm/gRPC ratio, and bytes moved per second (input + output)
against a numpy memcpy of the same size measured in the same run. Concurrency 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from bench.servers import ROOT, start_pbd

MODEL = "identity_fp32"


def rate(fn, seconds: float) -> float:  # noqa: ANN001 - a zero-argument callable
    """Calls of ``fn`` per second over ``seconds`` (after one warm-up call)."""
    fn()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return count / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="system shared memory vs plain gRPC")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args(argv)
    elements = args.mib * 1024 * 1024 // 4
    nbytes = elements * 4
    data = np.random.default_rng(0).random((1, elements), dtype=np.float32)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    server = start_pbd(
        sys.executable, log_dir, ROOT / "examples" / "models", MODEL, f"pbdshm{os.getpid()}",
        ["--allow-client-shm", "true"],
    )  # fmt: skip
    key = f"/pbdbench_shm_{os.getpid()}"
    region = shm.create_shared_memory_region("bench", key, 2 * nbytes)
    try:
        client = grpcclient.InferenceServerClient(server.target)
        shm.set_shared_memory_region(region, [data])
        client.register_system_shared_memory("bench", key, 2 * nbytes)
        wire_in = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        wire_in.set_data_from_numpy(data)
        shm_in = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        shm_in.set_shared_memory("bench", nbytes)
        shm_out = grpcclient.InferRequestedOutput("OUTPUT0")
        shm_out.set_shared_memory("bench", nbytes, offset=nbytes)

        def over_wire() -> None:
            client.infer(MODEL, [wire_in]).as_numpy("OUTPUT0")

        def over_shm() -> None:
            client.infer(MODEL, [shm_in], outputs=[shm_out])

        over_shm()
        out = shm.get_contents_as_numpy(region, np.float32, list(data.shape), offset=nbytes)
        if not np.array_equal(out, data):
            raise AssertionError("shared-memory output differs from the input")
        target = np.empty_like(data)
        memcpy = rate(lambda: np.copyto(target, data), args.seconds)
        wire = rate(over_wire, args.seconds)
        via_shm = rate(over_shm, args.seconds)
        client.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(region)
        server.stop()
    gb = nbytes / 1e9
    print(f"{args.mib} MiB FP32 identity, concurrency 1, {args.seconds:g} s each")
    print(f"plain gRPC        {wire:8.1f} infer/s   {2 * gb * wire:6.2f} GB/s in+out")
    print(f"system shm        {via_shm:8.1f} infer/s   {2 * gb * via_shm:6.2f} GB/s in+out")
    print(f"memcpy (numpy)    {memcpy:8.1f} copies/s  {gb * memcpy:6.2f} GB/s")
    print(f"shm / gRPC        {via_shm / wire:8.1f}x")
    print(f"shm one copy / memcpy: {gb * via_shm / (gb * memcpy):.2f} (the output copy per infer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
