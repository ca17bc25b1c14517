"""run_traced: the one path every edge answers an inference request through."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from pbd.errors import PbdError, unavailable
from pbd.tracing.answer import run_traced
from pbd.types import InferRequest, InferResult


class FakeTrace:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def responded(self, when: int) -> None:
        self.events.append("responded")


@contextlib.contextmanager
def finishing(trace: Any) -> Iterator[None]:
    try:
        yield
    except PbdError as exc:
        trace.events.append(("failed", exc.message))
        raise
    trace.events.append("finished")


def served(released: list[str]) -> Any:
    async def infer(request: InferRequest) -> InferResult:
        result = InferResult("m", "1", request.id, [])
        result._release = lambda: released.append(request.id)
        return result

    return infer


def test_untraced_the_result_is_encoded_then_released() -> None:
    released: list[str] = []
    request = InferRequest("m", "1", "a", [])

    def encode(result: InferResult) -> str:
        assert released == []  # the bytes are still there while encoding
        return result.id

    answer = asyncio.run(run_traced(request, None, served(released), encode, finishing))
    assert (answer, released, request.trace) == ("a", ["a"], None)


def test_traced_the_trace_rides_on_the_request_and_the_span_ends_once() -> None:
    released: list[str] = []
    request = InferRequest("m", "1", "b", [])
    trace = FakeTrace()
    answer = asyncio.run(
        run_traced(request, trace, served(released), lambda r: r.id, finishing)  # type: ignore[arg-type]
    )
    assert (answer, released, request.trace) == ("b", ["b"], trace)
    assert trace.events == ["responded", "finished"]


def test_traced_a_failure_ends_the_span_with_it() -> None:
    async def infer(request: InferRequest) -> InferResult:
        raise unavailable("no instance")

    trace = FakeTrace()
    request = InferRequest("m", "1", "c", [])
    with pytest.raises(PbdError):
        asyncio.run(run_traced(request, trace, infer, lambda r: r.id, finishing))  # type: ignore[arg-type]
    assert trace.events == [("failed", "no instance")]
