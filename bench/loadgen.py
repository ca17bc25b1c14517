"""A closed-loop ModelInfer load generator and its statistics.

``concurrency`` coroutines share one grpc.aio channel; each sends a request, waits for the
answer and sends the next. The first ``warmup`` seconds are not counted; then a window of
``duration`` seconds is measured. Every run is bounded twice: by time (no request starts after
the window closes, and each call has a deadline) and by count (``max_requests``).

The request is serialized once and sent as bytes, and answers are taken as bytes (identity
serializers), so the client's CPU per call is small and the same for every server. A probe
answer before the load and every ``check_every``-th answer during it are parsed with
tritonclient's ``ModelInferResponse`` and compared with the input, so a server that answers
wrongly cannot post a number: the probe raises :class:`ResponseMismatch`, later ones are counted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


class ResponseMismatch(AssertionError):
    """An answer whose output is not the request's input."""


@dataclass(frozen=True)
class LoadStats:
    """One measured window: calls that completed inside it, and CPU seconds spent during it.

    ``errors`` and ``mismatches`` count the warm-up too: any of them makes the run invalid.
    ``capped`` says the window ended early because ``max_requests`` were sent. ``cpu_s`` holds
    how far each CPU clock advanced during the window (``client``: this process).
    """

    requests: int
    errors: int
    mismatches: int
    window_s: float
    infer_per_s: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    capped: bool = False
    first_error: str = ""
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.requests > 0 and self.errors == 0 and self.mismatches == 0


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values, ``q`` in [0, 100]; NaN when empty."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(
    latencies_s: Sequence[float], window_s: float, errors: int = 0, mismatches: int = 0
) -> LoadStats:
    """Throughput and latency percentiles (ms) of one window's successful calls."""
    ordered = sorted(latencies_s)
    count = len(ordered)
    return LoadStats(
        requests=count,
        errors=errors,
        mismatches=mismatches,
        window_s=window_s,
        infer_per_s=count / window_s if window_s > 0 else 0.0,
        p50_ms=percentile(ordered, 50) * 1000,
        p99_ms=percentile(ordered, 99) * 1000,
        mean_ms=sum(ordered) / count * 1000 if count else math.nan,
    )


def build_request(model: str, shape: list[int], seed: int = 0) -> tuple[bytes, bytes]:
    """A serialized FP32 ``ModelInferRequest`` for input ``INPUT0`` and the raw bytes it carries."""
    data = np.random.default_rng(seed).random(shape, dtype=np.float32).tobytes()
    request = service_pb2.ModelInferRequest(model_name=model, id="bench")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
    request.raw_input_contents.append(data)
    return request.SerializeToString(), data


def build_shm_request(model: str, shape: list[int], input_region: str, output_region: str) -> bytes:
    """A serialized FP32 ``ModelInferRequest`` whose ``INPUT0`` is read from, and whose
    ``OUTPUT0`` is written to, registered system shared-memory regions (offset 0, the tensor's
    size each): the system shared-memory extension, no tensor bytes on the wire."""
    nbytes = 4 * math.prod(shape)
    request = service_pb2.ModelInferRequest(model_name=model, id="bench")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
    output = request.outputs.add(name="OUTPUT0")
    for entry, region in ((tensor, input_region), (output, output_region)):
        entry.parameters["shared_memory_region"].string_param = region
        entry.parameters["shared_memory_byte_size"].int64_param = nbytes
    return request.SerializeToString()


def check_shm_response(raw: bytes, shape: list[int]) -> None:
    """Raise :class:`ResponseMismatch` unless ``raw`` names ``OUTPUT0`` FP32 ``shape`` and
    carries no tensor bytes (they went to the output region; the caller compares those)."""
    response = service_pb2.ModelInferResponse.FromString(raw)
    outputs = [(o.name, o.datatype, list(o.shape)) for o in response.outputs]
    if outputs != [("OUTPUT0", "FP32", shape)]:
        raise ResponseMismatch(f"expected OUTPUT0 FP32 {shape}, got {outputs}")
    if any(response.raw_output_contents):
        raise ResponseMismatch("output bytes on the wire although a region was given")


def check_response(raw: bytes, shape: list[int], data: bytes) -> None:
    """Raise :class:`ResponseMismatch` unless ``raw`` answers ``OUTPUT0`` = the input."""
    response = service_pb2.ModelInferResponse.FromString(raw)
    outputs = [(o.name, o.datatype, list(o.shape)) for o in response.outputs]
    if outputs != [("OUTPUT0", "FP32", shape)]:
        raise ResponseMismatch(f"expected OUTPUT0 FP32 {shape}, got {outputs}")
    if list(response.raw_output_contents) != [data]:
        raise ResponseMismatch("raw_output_contents differ from the input bytes")


@dataclass
class Window:
    """What the workers share; the two marks are set by timer callbacks on the loop."""

    clocks: dict[str, Callable[[], float]]
    start: float = math.inf
    end: float = math.inf
    cpu_at_start: dict[str, float] = field(default_factory=dict)
    cpu_at_end: dict[str, float] = field(default_factory=dict)
    closed: bool = False
    sent: int = 0
    errors: int = 0
    mismatches: int = 0
    completions: int = 0
    first_error: str = ""
    latencies: list[float] = field(default_factory=list)

    def open(self) -> None:
        self.cpu_at_start = {name: clock() for name, clock in self.clocks.items()}
        self.start = time.perf_counter()

    def close(self) -> None:
        if not self.closed:
            self.end = time.perf_counter()
            self.cpu_at_end = {name: clock() for name, clock in self.clocks.items()}
            self.closed = True


async def run_load(
    target: str,
    payload: bytes,
    shape: list[int],
    data: bytes,
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    max_requests: int = 200_000,
    call_timeout: float = 30.0,
    check_every: int = 64,
    clocks: Mapping[str, Callable[[], float]] | None = None,
    check: Callable[[bytes], None] | None = None,
) -> LoadStats:
    """Measure one closed-loop window against ``target`` (see the module docstring).

    ``clocks`` are CPU-seconds counters (e.g. the server's) read when the window opens and closes.
    ``check`` raises :class:`ResponseMismatch` for a wrong answer; by default
    :func:`check_response` with ``shape`` and ``data``.
    """
    if check is None:

        def check(raw: bytes) -> None:
            check_response(raw, shape, data)

    window = Window({"client": time.process_time, **(clocks or {})})
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        call = channel.unary_unary(MODEL_INFER)
        check(await call(payload, timeout=call_timeout))
        loop = asyncio.get_running_loop()
        opener = loop.call_later(warmup, window.open)
        closer = loop.call_later(warmup + duration, window.close)

        async def worker() -> None:
            while not window.closed and window.sent < max_requests:
                window.sent += 1
                began = time.perf_counter()
                try:
                    raw = await call(payload, timeout=call_timeout)
                except grpc.RpcError as exc:
                    window.errors += 1
                    window.first_error = window.first_error or f"{exc.code()}: {exc.details()}"
                    continue
                ended = time.perf_counter()
                window.completions += 1
                if window.completions % check_every == 0:
                    try:
                        check(raw)
                    except ResponseMismatch:
                        window.mismatches += 1
                if window.start <= ended <= window.end:
                    window.latencies.append(ended - began)

        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker() for _ in range(concurrency))),
                timeout=warmup + duration + call_timeout + 5,
            )
        finally:
            opener.cancel()
            closer.cancel()
        capped = not window.closed
        window.close()
    cpu_s = {
        name: window.cpu_at_end[name] - window.cpu_at_start[name] for name in window.cpu_at_start
    }
    stats = summarize(
        window.latencies,
        max(0.0, window.end - window.start) if window.start < math.inf else 0.0,
        window.errors,
        window.mismatches,
    )
    return replace(
        stats,
        capped=capped,
        first_error=window.first_error,
        cpu_s=cpu_s,
    )
