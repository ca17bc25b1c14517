"""The dataplane without processes: a fake repository whose versions answer when the test says.

Admission (the in-flight count and the input bytes held, ``--max-queued-bytes``), ModelInfer's
refusal of decoupled models, streams, a caller that gives up, and drain. The real daemon is in
tests/integration (test_overload, test_decoupled, test_lifecycle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from config_samples import ADD_SUB, parse

from pbd.dataplane import DataPlane
from pbd.errors import Code, PbdError, not_found
from pbd.memory.client_shm import ClientShmRegistry
from pbd.modelconfig.model import ModelConfig
from pbd.responses import StreamResult
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.types import InferRequest, InferResult, InputTensor, PreparedRequest

WAIT_S = 5.0  # a bound on a test that went wrong, never reached when it passes
DECOUPLED = ADD_SUB.replace('name: "add_sub"', 'name: "d"') + (
    "model_transaction_policy { decoupled: true }\n"
)
INPUT_BYTES = 2 * 4 * 4  # add_sub: two FP32 inputs of 4 values


class FakeVersion:
    """A loaded version whose requests wait until ``answer()``; a decoupled one streams two
    responses and a final flag first."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.stats = ModelStats()
        self.running: list[PreparedRequest] = []
        self.cancelled: list[str] = []
        self._go = asyncio.Event()

    async def infer(self, prepared: PreparedRequest) -> InferResult:
        ident = prepared.request.id
        prepared.on_cancel = lambda: self.cancelled.append(ident)
        self.running.append(prepared)
        await self._go.wait()
        if prepared.stream is not None and self.config.decoupled:
            for n in range(2):
                prepared.stream.put(StreamResult(InferResult("d", "1", f"{ident}.{n}", [])))
            prepared.stream.put(StreamResult(final=True))
        return InferResult(self.config.name, "1", ident, [])

    def answer(self) -> None:
        self._go.set()


class FakeRepository:
    """``lookup`` as the real repository answers it, over fixed versions."""

    def __init__(self, *versions: FakeVersion) -> None:
        self.versions = {v.config.name: v for v in versions}

    def lookup(self, name: str, version: str) -> FakeVersion:
        try:
            return self.versions[name]
        except KeyError:
            raise not_found(f"Request for unknown model: '{name}' is not found") from None


def make(*configs: str, max_queued_bytes: int = 0) -> tuple[DataPlane, list[FakeVersion]]:
    names = {ADD_SUB: "add_sub", DECOUPLED: "d"}
    versions = [FakeVersion(parse(text, name=names[text])) for text in configs]
    plane = DataPlane(
        FakeRepository(*versions),  # type: ignore[arg-type]  # stands for ModelRepository
        Settings(max_queued_bytes=max_queued_bytes),
        ClientShmRegistry(enabled=False, key_prefixes=[]),
    )
    plane.started = True
    return plane, versions


def request(model: str = "add_sub", ident: str = "r") -> InferRequest:
    data = memoryview(np.arange(4, dtype=np.float32).tobytes())
    inputs = [InputTensor(name, "FP32", (4,), data) for name in ("INPUT0", "INPUT1")]
    return InferRequest(model, "", ident, inputs)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (a few iterations; no wall clock)."""
    while not condition():
        await asyncio.sleep(0)


def test_an_admitted_request_is_counted_until_it_is_answered() -> None:
    async def scenario() -> None:
        plane, (version,) = make(ADD_SUB)
        task = asyncio.ensure_future(plane.infer(request()))
        await until(lambda: bool(version.running))
        assert (plane.inflight, plane.budget.held) == (1, INPUT_BYTES)
        version.answer()
        assert (await task).id == "r"
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_past_max_queued_bytes_a_request_is_refused_and_counted_rejected() -> None:
    async def scenario() -> None:
        plane, (version,) = make(ADD_SUB, max_queued_bytes=INPUT_BYTES + 1)
        first = asyncio.ensure_future(plane.infer(request(ident="1")))
        await until(lambda: bool(version.running))
        with pytest.raises(PbdError) as refused:
            await plane.infer(request(ident="2"))
        assert refused.value.code is Code.RESOURCE_EXHAUSTED
        assert f"already holds {INPUT_BYTES} bytes" in refused.value.message
        assert "--max-queued-bytes" in refused.value.message
        assert version.stats.failures["REJECTED"] == 1 and len(version.running) == 1
        assert (plane.inflight, plane.budget.held) == (1, INPUT_BYTES)  # the refused left none
        version.answer()
        await first
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_a_request_larger_than_the_limit_alone_is_admitted() -> None:
    async def scenario() -> None:
        # Refusing it would refuse it forever: the limit bounds what waits, not one request.
        plane, (version,) = make(ADD_SUB, max_queued_bytes=1)
        version.answer()
        assert (await plane.infer(request())).id == "r"

    run(scenario)


def test_model_infer_refuses_a_decoupled_model_and_holds_nothing() -> None:
    async def scenario() -> None:
        plane, (version,) = make(DECOUPLED)
        with pytest.raises(PbdError) as refused:
            await plane.infer(request("d"))
        assert refused.value.code is Code.UNSUPPORTED
        assert refused.value.message == (
            "ModelInfer RPC doesn't support models with decoupled transaction policy"
        )
        assert not version.running and (plane.inflight, plane.budget.held) == (0, 0)
        assert plane.is_decoupled(request("d")) and not plane.is_decoupled(request("nothing"))

    run(scenario)


def test_a_stream_gives_every_response_of_a_decoupled_model_then_the_final_flag() -> None:
    async def scenario() -> None:
        plane, (version,) = make(DECOUPLED)
        version.answer()
        items = [item async for item in plane.infer_stream(request("d"))]
        assert [i.result.id if i.result else None for i in items] == ["r.0", "r.1", None]
        assert [i.final for i in items] == [False, False, True]
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_a_stream_of_a_model_that_is_not_decoupled_fails_with_its_error() -> None:
    async def scenario() -> None:
        plane, _ = make(ADD_SUB)
        with pytest.raises(PbdError) as unknown:
            await anext(plane.infer_stream(request("nothing")))
        assert unknown.value.code is Code.NOT_FOUND
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_a_caller_that_gives_up_cancels_its_request_in_the_worker() -> None:
    async def scenario() -> None:
        plane, (version,) = make(ADD_SUB)
        task = asyncio.ensure_future(plane.infer(request(ident="gone")))
        await until(lambda: bool(version.running))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert version.cancelled == ["gone"]
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_a_stream_left_early_cancels_its_request() -> None:
    async def scenario() -> None:
        plane, (version,) = make(DECOUPLED)
        stream = plane.infer_stream(request("d", ident="left"))
        reading = asyncio.ensure_future(anext(stream))
        await until(lambda: bool(version.running))
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await stream.aclose()
        assert version.cancelled == ["left"]
        assert (plane.inflight, plane.budget.held) == (0, 0)

    run(scenario)


def test_drain_refuses_new_requests_and_waits_for_those_in_flight() -> None:
    async def scenario() -> None:
        plane, (version,) = make(ADD_SUB)
        task = asyncio.ensure_future(plane.infer(request()))
        await until(lambda: bool(version.running))
        assert not await plane.drain(0.01)  # one still in flight after the timeout
        assert not plane.server_ready()
        with pytest.raises(PbdError) as refused:
            await plane.infer(request(ident="late"))
        assert refused.value.code is Code.UNAVAILABLE and "shutting down" in refused.value.message
        draining = asyncio.ensure_future(plane.drain(WAIT_S))
        version.answer()
        await task
        assert await draining

    run(scenario)


def test_drain_with_nothing_in_flight_ends_at_once() -> None:
    async def scenario() -> None:
        plane, _ = make(ADD_SUB)
        assert await plane.drain(0)

    run(scenario)


def test_time_to_first_response_is_recorded_only_when_the_histogram_is_served() -> None:
    async def scenario() -> None:
        for served in (False, True):
            plane, (version, stream_version) = make(ADD_SUB, DECOUPLED)
            plane.settings.metrics_histogram_latencies = served
            version.answer()
            stream_version.answer()
            await plane.infer(request())
            items = [item async for item in plane.infer_stream(request("d"))]
            assert len(items) == 3
            for each in (version, stream_version):
                histogram = each.stats.first_response
                if not served:
                    assert histogram is None
                else:  # one observation per request: the stream's first response only
                    assert histogram is not None and sum(histogram.counts) == 1

    run(scenario)
