"""The HTTP/REST binding against gRPC, same daemon, same run.

    python -m bench.http_vs_grpc [--duration 5] [--warmup 1]

identity_fp32 with FP32 [1,16] at concurrency 8 and [1,262144] (1 MiB) at concurrency 1.
HTTP uses the binary tensor data extension (as tritonclient.http does by default) over
keep-alive connections, one pre-built request written at once; gRPC uses the bench's
pre-serialized load generator. (aiohttp's client was tried first and stalled ~40 ms per
1 MiB call, the delayed-ACK pattern; tritonclient.http does not.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import numpy as np

from bench.loadgen import build_request, percentile, run_load
from bench.servers import ROOT, free_port, start_pbd

MODEL = "identity_fp32"
SCENARIOS = [([1, 16], 8), ([1, 262144], 1)]


def _http_body(shape: list[int]) -> tuple[bytes, int, bytes]:
    data = np.random.default_rng(0).random(shape, dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": shape, "datatype": "FP32",
                 "parameters": {"binary_data_size": len(data)}}
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()  # fmt: skip
    return header + data, len(header), data


class _Connection:
    """One keep-alive HTTP/1.1 connection that writes each request in a single write."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        self.writer.write(request)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            key, _, value = line.decode().partition(":")
            headers[key.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body


async def http_load(
    port: int, shape: list[int], concurrency: int, duration: float, warmup: float
) -> tuple[float, float, float, int]:
    body, header_len, data = _http_body(shape)
    request = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        f"Inference-Header-Content-Length: {header_len}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    errors = 0

    async def once(conn: _Connection) -> bytes:
        status, headers, payload = await conn.post(request)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {payload[:200]!r}")
        return payload[int(headers["inference-header-content-length"]) :]

    async def connect() -> _Connection:
        return _Connection(*await asyncio.open_connection("127.0.0.1", port))

    first = await connect()
    if await once(first) != data:
        raise AssertionError("HTTP answer differs from the input")
    first.writer.close()
    start = time.monotonic()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def worker() -> None:
        nonlocal errors
        conn = await connect()
        while time.monotonic() < stop_at:
            began = time.perf_counter()
            try:
                await once(conn)
            except (OSError, RuntimeError, asyncio.IncompleteReadError):
                errors += 1
                conn = await connect()
                continue
            if time.monotonic() >= measure_from:
                latencies.append((time.perf_counter() - began) * 1000)
        conn.writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    ordered = sorted(latencies)
    return len(latencies) / duration, percentile(ordered, 50), percentile(ordered, 99), errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTTP vs gRPC on the same pbd daemon")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    args = parser.parse_args(argv)
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(exist_ok=True)
    http_port = free_port()
    server = start_pbd(
        sys.executable, log_dir, ROOT / "examples" / "models", MODEL,
        f"pbdhttp{os.getpid()}", ["--http-port", str(http_port)],
    )  # fmt: skip
    failed = 0
    try:
        print(f"{'scenario':24} {'grpc/s':>8} {'p50':>6} {'p99':>6} | {'http/s':>8} {'p50':>6} "
              f"{'p99':>6} | http/grpc")  # fmt: skip
        for shape, conc in SCENARIOS:
            payload, data = build_request(MODEL, shape)
            g = asyncio.run(
                run_load(server.target, payload, shape, data, concurrency=conc,
                         duration=args.duration, warmup=args.warmup)
            )  # fmt: skip
            h_rate, h50, h99, h_err = asyncio.run(
                http_load(http_port, shape, conc, args.duration, args.warmup)
            )
            failed += g.errors + h_err
            label = f"fp32 {shape} c={conc}"
            ratio = h_rate / g.infer_per_s
            print(f"{label:24} {g.infer_per_s:8.0f} {g.p50_ms:6.2f} {g.p99_ms:6.2f} | "
                  f"{h_rate:8.0f} {h50:6.2f} {h99:6.2f} | {ratio:9.2f}")  # fmt: skip
    finally:
        server.stop()
    print(f"errors: {failed}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
