"""Token streams: pbd's generate_stream against Triton 2.51's, same model, same load, same run.

    python -m bench.generate [--tokens N] [--token-ms MS] [--concurrency C ...] [--duration S]
                             [--warmup S] [--repeat N] [--quick] [--python PY] [--json PATH]

Both servers serve ``bench/models`` with only ``token_stream`` loaded (a decoupled python model
that streams ``max_tokens`` short tokens, one response each, ``token_ms`` apart: by default
none, so what is measured is serving the stream), on 127.0.0.1 and free ports. The client is
aiohttp, the same for both: ``C`` workers in a closed loop each POST
``/v2/models/token_stream/generate_stream`` and read the events as they come. Per run:
requests/s and tokens/s completed inside the measured window, time to first token (request sent
-> first event read) and request latency, p50 and p99. Per scenario and repeat the servers take
turns (Triton first on even repeats); medians over ``--repeat``. Every answer must hold ``N``
events with the right tokens; a wrong one is counted and fails the run. See bench/README.md,
"Token streams".

Exit code 0 when every answer was right, no call failed and pbd stopped cleanly; 1 otherwise;
2 when a server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import grpc
from tritonclient.grpc import service_pb2 as pb

from bench.loadgen import percentile
from bench.procstat import cpu_seconds
from bench.run import add_common_args, check_common_args, common_header
from bench.servers import ROOT, ServerProcess, free_port, leftover_segments, start_pbd, start_triton
from bench.vs_triton import add_triton_args, install_triton

MODEL = "token_stream"
REPOSITORY = ROOT / "bench" / "models"
RESULTS = ROOT / "bench" / "results"
SERVERS = ("triton", "pbd")


@dataclass
class Run:
    server: str
    concurrency: int
    requests_per_s: float
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    requests: int
    failures: int
    # CPU of the server's own process per request answered (warm-up included): pbd's daemon
    # (not its front ends or workers), Triton's whole server.
    main_cpu_us: float = 0.0


class WrongAnswer(AssertionError):
    pass


async def one_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, tokens: int
) -> tuple[float, float]:
    """One request: (seconds to its first event, seconds to its end); checks every token."""
    began = time.perf_counter()
    first = 0.0
    got = 0
    async with session.post(url, data=body) as response:
        if response.status != 200:
            raise WrongAnswer(f"status {response.status}: {await response.text()}")
        async for line in response.content:
            if not line.startswith(b"data:"):
                continue
            if not first:
                first = time.perf_counter() - began
            event = json.loads(line[5:])
            if event.get("text_output") != f" t{got}":
                raise WrongAnswer(f"event {got}: {event}")
            got += 1
    if got != tokens:
        raise WrongAnswer(f"{got} events, expected {tokens}")
    return first, time.perf_counter() - began


STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


def stream_request(tokens: int, token_ms: float) -> bytes:
    """The same request as a ModelStreamInfer message, asking for Triton's empty final
    response so that the client knows when the stream's request is over."""
    msg = pb.ModelInferRequest(model_name=MODEL)
    text = msg.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    del text  # raw contents below
    msg.inputs.add(name="max_tokens", datatype="INT32", shape=[1])
    msg.raw_input_contents.append(struct.pack("<I", 1) + b"x")
    msg.raw_input_contents.append(struct.pack("<i", tokens))
    if token_ms:
        msg.inputs.add(name="token_ms", datatype="FP32", shape=[1])
        msg.raw_input_contents.append(struct.pack("<f", token_ms))
    msg.parameters["triton_enable_empty_final_response"].bool_param = True
    return bytes(msg.SerializeToString())


async def one_grpc_stream(
    channel: grpc.aio.Channel, body: bytes, tokens: int
) -> tuple[float, float]:
    """One request on a ModelStreamInfer stream of its own: (seconds to its first response,
    seconds to its final one); checks every token."""
    began = time.perf_counter()
    first = 0.0
    got = 0
    call = channel.stream_stream(
        STREAM_INFER, request_serializer=None, response_deserializer=None
    )(iter([body]))
    async for raw in call:
        reply = pb.ModelStreamInferResponse.FromString(raw)
        if reply.error_message:
            raise WrongAnswer(reply.error_message)
        response = reply.infer_response
        if response.parameters["triton_final_response"].bool_param and not response.outputs:
            break
        if not first:
            first = time.perf_counter() - began
        token = bytes(response.raw_output_contents[0][4:]).decode()
        if token != f" t{got}":
            raise WrongAnswer(f"response {got}: {token!r}")
        got += 1
        if response.parameters["triton_final_response"].bool_param:
            break
    call.cancel()
    if got != tokens:
        raise WrongAnswer(f"{got} responses, expected {tokens}")
    return first, time.perf_counter() - began


async def load(
    server: str,
    port: int,
    tokens: int,
    concurrency: int,
    duration: float,
    warmup: float,
    token_ms: float = 0.0,
    grpc_port: int = 0,
    pid: int = 0,
) -> Run:
    """``concurrency`` closed-loop streams for ``duration`` after ``warmup``: over HTTP's
    generate_stream, or (``grpc_port``) ModelStreamInfer, one channel shared by them."""
    url = f"http://127.0.0.1:{port}/v2/models/{MODEL}/generate_stream"
    body = json.dumps({"text_input": "x", "max_tokens": tokens, "token_ms": token_ms}).encode()
    grpc_body = stream_request(tokens, token_ms)
    firsts: list[float] = []
    latencies: list[float] = []
    failures = 0
    answered = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port or 1}") as channel,
    ):

        async def one() -> tuple[float, float]:
            if grpc_port:
                return await one_grpc_stream(channel, grpc_body, tokens)
            return await one_stream(session, url, body, tokens)

        await one()  # the probe: a wrong answer stops the run
        cpu_before = cpu_seconds(pid) if pid else 0.0
        start = time.perf_counter() + warmup
        end = start + duration

        async def worker() -> None:
            nonlocal failures, answered
            while time.perf_counter() < end:
                sent = time.perf_counter()
                try:
                    first, total = await one()
                except (WrongAnswer, aiohttp.ClientError, grpc.RpcError, TimeoutError):
                    failures += 1
                    continue
                answered += 1
                if sent >= start and sent + total <= end:
                    firsts.append(first)
                    latencies.append(total)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu = cpu_seconds(pid) - cpu_before if pid else 0.0
    firsts.sort()
    latencies.sort()
    return Run(
        server,
        concurrency,
        len(latencies) / duration,
        len(latencies) * tokens / duration,
        percentile(firsts, 50) * 1000,
        percentile(firsts, 99) * 1000,
        percentile(latencies, 50) * 1000,
        percentile(latencies, 99) * 1000,
        len(latencies),
        failures,
        cpu / max(answered, 1) * 1e6,
    )


def median_run(runs: list[Run]) -> Run:
    """Per field the median over repeats."""
    fields = {
        key: statistics.median(getattr(r, key) for r in runs)
        for key in asdict(runs[0])
        if key not in ("server", "concurrency", "requests", "failures")
    }
    return Run(
        runs[0].server, runs[0].concurrency, **fields,
        requests=sum(r.requests for r in runs), failures=sum(r.failures for r in runs),
    )  # fmt: skip


def table(rows: list[tuple[Run, Run]], tokens: int, token_ms: float = 0.0) -> str:
    head = (
        f"{'c':>3} | {'server':6} {'req/s':>7} {'tok/s':>8} {'ttft p50':>9} {'p99':>7} "
        f"{'lat p50':>8} {'p99':>7} {'main µs':>8} | tok/s pbd/triton  ttft pbd/triton"
    )
    lines = [
        f"token_stream, {tokens} tokens per request, {token_ms:g} ms each",
        head,
        "-" * len(head),
    ]
    for triton, pbd in rows:
        for run in (triton, pbd):
            ratio = ""
            if run is pbd:
                ratio = (
                    f" | {pbd.tokens_per_s / triton.tokens_per_s:16.2f}"
                    f"  {pbd.ttft_p50_ms / triton.ttft_p50_ms:15.2f}"
                )
            lines.append(
                f"{run.concurrency:>3} | {run.server:6} {run.requests_per_s:7.1f} "
                f"{run.tokens_per_s:8.0f} {run.ttft_p50_ms:8.2f}ms {run.ttft_p99_ms:6.2f}ms "
                f"{run.latency_p50_ms:7.1f}ms {run.latency_p99_ms:6.1f}ms "
                f"{run.main_cpu_us:8.0f}{ratio}"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.generate",
        description="token streams: pbd's generate_stream against Triton's, same run",
    )
    add_common_args(parser, RESULTS / "generate.json")
    add = parser.add_argument
    add("--tokens", type=int, default=64, help="tokens (responses) per request (default 64)")
    add("--concurrency", type=int, nargs="+", default=[1, 8], help="streams at once (1 8)")
    add("--token-ms", type=float, default=0.0, help="the model's time per token (default 0)")
    add(
        "--protocol",
        choices=("http", "grpc"),
        default="http",
        help="http: generate_stream (SSE); grpc: ModelStreamInfer, a stream per request",
    )
    add_triton_args(parser)
    opts = check_common_args(parser, parser.parse_args(argv))
    if opts.tokens < 1 or min(opts.concurrency) < 1:
        parser.error("--tokens and --concurrency must be >= 1")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    tritonserver = opts.tritonserver or install_triton()
    started: dict[str, ServerProcess] = {}
    shm_prefix = f"pbdgen{os.getpid()}"
    pbd_http = free_port()
    results: dict[str, object] = {
        **common_header(opts), "tokens": opts.tokens, "token_ms": opts.token_ms,
        "protocol": opts.protocol,
    }  # fmt: skip
    try:
        started["triton"] = start_triton(tritonserver, RESULTS, REPOSITORY, MODEL, opts.triton_arg)
        started["pbd"] = start_pbd(
            opts.python, RESULTS, REPOSITORY, MODEL, shm_prefix,
            ["--http-port", str(pbd_http), *opts.pbd_arg], name="pbd-generate",
        )  # fmt: skip
    except RuntimeError as exc:
        print(f"bench.generate: {exc}", file=sys.stderr)
        for server in started.values():
            server.stop()
        return 2
    ports = {"triton": started["triton"].http_port, "pbd": pbd_http}
    rows: list[tuple[Run, Run]] = []
    failed = False
    try:
        for concurrency in opts.concurrency:
            runs: dict[str, list[Run]] = {name: [] for name in SERVERS}
            for repeat in range(opts.repeat):
                order = SERVERS if repeat % 2 == 0 else SERVERS[::-1]
                for name in order:
                    grpc_port = started[name].port if opts.protocol == "grpc" else 0
                    run = asyncio.run(
                        load(name, ports[name], opts.tokens, concurrency, opts.duration,
                             opts.warmup, opts.token_ms, grpc_port, started[name].proc.pid)
                    )  # fmt: skip
                    runs[name].append(run)
                    failed |= run.failures > 0
            rows.append((median_run(runs["triton"]), median_run(runs["pbd"])))
    except WrongAnswer as exc:
        print(f"bench.generate: a wrong first answer: {exc}", file=sys.stderr)
        failed = True
    finally:
        codes = {name: server.stop() for name, server in started.items()}
        left = leftover_segments(shm_prefix)
    failed |= codes.get("pbd", 1) != 0 or bool(left)
    print(f"protocol: {opts.protocol}")
    print(table(rows, opts.tokens, opts.token_ms))
    results.update(
        rows=[[asdict(t), asdict(p)] for t, p in rows], pbd_exit_code=codes.get("pbd"),
        pbd_shm_left=left, triton_exit_code=codes.get("triton"),
    )  # fmt: skip
    Path(opts.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
