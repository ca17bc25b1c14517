"""256 MiB FP32 identity through CUDA shared memory against a device-to-device copy, same run.

    python -m bench.cuda_shm [--seconds 5] [--mib 256] [--device 0]

The client (this process) allocates an input and an output region with
``tritonclient.utils.cuda_shared_memory`` and registers both; the daemon serves
``tests/gpu/models/gpu_identity`` (KIND_GPU, GPU inputs), whose worker opens the client's
handles, hands the model the input as a GPU tensor and copies its output, device to device,
into the output region: one copy per infer. The baseline is a CuPy device-to-device copy of the
same size on the same GPU, measured in this run. Reports infer/s, GB/s of that one copy, and
the fraction of the baseline. Needs a GPU, CuPy and cuda-python (``.[gpu,gpu-test]``).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient

from bench.servers import ROOT, start_pbd
from bench.shm import rate

MODEL = "gpu_identity"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CUDA shared memory vs device-to-device copy")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    import cupy  # type: ignore[import-not-found]
    import tritonclient.utils.cuda_shared_memory as cudashm

    elements = args.mib * 1024 * 1024 // 4
    nbytes = elements * 4
    data = np.random.default_rng(0).random(elements, dtype=np.float32)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    server = start_pbd(
        sys.executable, log_dir, ROOT / "tests" / "gpu" / "models", MODEL,
        f"pbdcuda{os.getpid()}", ["--allow-client-shm", "true"],
    )  # fmt: skip
    src = cudashm.create_shared_memory_region("bench_in", nbytes, args.device)
    dst = cudashm.create_shared_memory_region("bench_out", nbytes, args.device)
    try:
        client = grpcclient.InferenceServerClient(server.target)
        cudashm.set_shared_memory_region(src, [data])
        for region in (src, dst):
            name = "bench_in" if region is src else "bench_out"
            raw = cudashm.get_raw_handle(region)
            client.register_cuda_shared_memory(name, raw, args.device, nbytes)
        x = grpcclient.InferInput("INPUT0", [elements], "FP32")
        x.set_shared_memory("bench_in", nbytes)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("bench_out", nbytes)

        def via_cuda_shm() -> None:
            client.infer(MODEL, [x], outputs=[out])

        via_cuda_shm()
        got = cudashm.get_contents_as_numpy(dst, np.float32, [elements])
        if not np.array_equal(got, data):
            raise AssertionError("CUDA shared-memory output differs from the input")
        with cupy.cuda.Device(args.device):
            a = cupy.empty(nbytes, dtype=cupy.uint8)
            b = cupy.empty(nbytes, dtype=cupy.uint8)

            def d2d() -> None:
                b.data.copy_from_device(a.data, nbytes)
                cupy.cuda.runtime.deviceSynchronize()

            copies = rate(d2d, args.seconds)
        served = rate(via_cuda_shm, args.seconds)
        client.unregister_cuda_shared_memory()
        client.close()
    finally:
        cudashm.destroy_shared_memory_region(src)
        cudashm.destroy_shared_memory_region(dst)
        server.stop()
    gb = nbytes / 1e9
    print(
        f"{args.mib} MiB FP32 identity on GPU {args.device}, concurrency 1, {args.seconds:g} s each"
    )
    print(f"device-to-device copy (CuPy)  {copies:8.1f} copies/s  {gb * copies:7.1f} GB/s")
    print(
        f"pbd CUDA shm identity         {served:8.1f} infer/s   {gb * served:7.1f} GB/s (one copy)"
    )
    print(f"fraction of the D2D copy      {served / copies:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
