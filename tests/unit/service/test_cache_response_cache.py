"""The response cache on the request path, over a model version that counts its executions.

Hits answer without the model, misses run and are inserted (also when the edge answers early),
failures are not cached, and the statistics are Triton's: a hit is a success and a queue entry
with no execution, a miss adds its lookup and insertion to the request's duration. The real
daemon against real clients is tests/integration/test_response_cache.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import numpy as np
import pytest
from config_samples import ADD_SUB, parse

from pbd.cache.response_cache import ResponseCache
from pbd.errors import Code, PbdError
from pbd.modelconfig.model import ModelConfig
from pbd.stats import ModelStats
from pbd.types import (
    InferRequest,
    InferResult,
    InputTensor,
    OutputTensor,
    PreparedRequest,
    ShmSlice,
)
from pbd.validation import prepare_request

CONFIG = parse(ADD_SUB + "response_cache { enable: true }", name="add_sub")


class CountingVersion:
    """A loaded version whose answer is OUTPUT0 = INPUT0 + the number of executions so far,
    held in a buffer it hands back on release (as a worker's segment is)."""

    def __init__(self, config: ModelConfig = CONFIG, version: int = 1) -> None:
        self.config = config
        self.version = version
        self.stats = ModelStats()
        self.serving = True
        self.executions = 0
        self.released = 0
        self.fail_with: PbdError | None = None

    async def infer(self, prepared: PreparedRequest) -> InferResult:
        if not self.serving:
            raise PbdError(Code.UNAVAILABLE, "not at ready state")
        if self.fail_with is not None:
            raise self.fail_with
        self.executions += 1
        first = prepared.inputs[0].data
        assert first is not None
        out = np.frombuffer(first, np.float32) + self.executions
        buffer = bytearray(out.tobytes())
        result = InferResult(
            self.config.name,
            str(self.version),
            prepared.request.id,
            [OutputTensor("OUTPUT0", "FP32", (4,), memoryview(buffer))],
            _release=self._release,
        )
        respond = prepared.request.respond
        if respond is not None:  # the edge answers where the result is read
            respond(result)
        return result

    def _release(self) -> None:
        self.released += 1


def request(ident: str = "r", first: float = 0.0) -> PreparedRequest:
    inputs = [
        InputTensor(n, "FP32", (4,), memoryview(np.full(4, v, np.float32).tobytes()))
        for n, v in (("INPUT0", first), ("INPUT1", 1.0))
    ]
    return prepare_request(InferRequest("add_sub", "", ident, inputs), CONFIG)


def run(coro: Coroutine[Any, Any, InferResult]) -> InferResult:
    return asyncio.run(coro)


def output(result: InferResult) -> list[float]:
    return np.frombuffer(result.outputs[0].data, np.float32).tolist()


def test_an_identical_request_is_answered_from_the_cache_without_running() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    with run(cache.infer(model, request("1"))) as first:
        assert output(first) == [1.0] * 4
    second = run(cache.infer(model, request("2")))
    assert (output(second), second.id, model.executions) == ([1.0] * 4, "2", 1)
    different = run(cache.infer(model, request("3", first=5.0)))
    assert output(different) == [7.0] * 4 and model.executions == 2


def test_statistics_count_a_hit_as_a_success_without_execution() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    model.stats.success.add(100)  # what the version counts for the request that ran
    run(cache.infer(model, request()))
    run(cache.infer(model, request()))
    stats = model.stats
    assert (stats.cache_miss.count, stats.cache_hit.count) == (1, 1)
    assert stats.success.count == 2 and stats.queue.count == 1  # the miss queued in the model
    assert stats.success.ns >= 100 + stats.cache_miss.ns + stats.cache_hit.ns
    assert stats.execution_count == 0 and stats.inference_count == 0
    assert (cache.lookups, cache.hits, cache.misses, len(cache.store)) == (2, 1, 1, 1)


def test_a_failed_request_is_not_cached_nor_counted_as_a_miss() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    model.fail_with = PbdError(Code.INTERNAL, "model failed")
    with pytest.raises(PbdError, match="model failed"):
        run(cache.infer(model, request()))
    assert (len(cache.store), model.stats.cache_miss.count) == (0, 0)
    model.fail_with = None
    run(cache.infer(model, request()))
    assert model.executions == 1 and model.stats.cache_miss.count == 1


def test_an_early_answer_is_cached_before_its_memory_goes_back() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    answered: list[list[float]] = []
    first = request("1")

    def respond(result: InferResult) -> None:  # what grpc ModelInfer's early answer does
        answered.append(output(result))
        result.release()
        result.answered = True

    first.request.respond = respond
    run(cache.infer(model, first))
    assert answered == [[1.0] * 4] and model.released == 1
    assert output(run(cache.infer(model, request("2")))) == [1.0] * 4
    assert model.executions == 1


def test_a_request_without_a_key_just_runs() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    for _ in range(2):
        prepared = request()
        prepared.output_targets["OUTPUT0"] = ShmSlice("client#1", 0, 16)  # answered there
        run(cache.infer(model, prepared))
    assert model.executions == 2 and cache.lookups == 0
    assert (model.stats.cache_hit.count, model.stats.cache_miss.count) == (0, 0)


def test_a_version_loaded_again_does_not_get_the_old_answers() -> None:
    cache = ResponseCache(1 << 20)
    run(cache.infer(CountingVersion(), request()))
    reloaded = CountingVersion()
    run(cache.infer(reloaded, request()))
    assert reloaded.executions == 1


def test_a_version_not_serving_answers_with_its_error_even_when_cached() -> None:
    cache, model = ResponseCache(1 << 20), CountingVersion()
    run(cache.infer(model, request()))
    model.serving = False
    with pytest.raises(PbdError, match="not at ready state"):
        run(cache.infer(model, request()))


def test_an_answer_bigger_than_the_cache_is_not_kept() -> None:
    cache, model = ResponseCache(32), CountingVersion()
    run(cache.infer(model, request()))
    run(cache.infer(model, request()))
    assert model.executions == 2 and len(cache.store) == 0
    assert model.stats.cache_miss.count == 2  # Triton counts both as misses too
