"""answer_request: the one path every edge answers an inference request through."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from pbd.answer import answer_request
from pbd.errors import PbdError, unavailable
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

    answer = asyncio.run(answer_request(request, None, served(released), encode, finishing))
    assert (answer, released, request.trace) == ("a", ["a"], None)


def test_traced_the_trace_rides_on_the_request_and_the_span_ends_once() -> None:
    released: list[str] = []
    request = InferRequest("m", "1", "b", [])
    trace = FakeTrace()
    answer = asyncio.run(
        answer_request(request, trace, served(released), lambda r: r.id, finishing)  # type: ignore[arg-type]
    )
    assert (answer, released, request.trace) == ("b", ["b"], trace)
    assert trace.events == ["responded", "finished"]


def test_traced_a_failure_ends_the_span_with_it() -> None:
    async def infer(request: InferRequest) -> InferResult:
        raise unavailable("no instance")

    trace = FakeTrace()
    request = InferRequest("m", "1", "c", [])
    with pytest.raises(PbdError):
        asyncio.run(answer_request(request, trace, infer, lambda r: r.id, finishing))  # type: ignore[arg-type]
    assert trace.events == [("failed", "no instance")]


def answered_early(released: list[str]) -> Any:
    """An infer whose instance answers through ``request.respond`` (pbd.instance.inflight)."""

    async def infer(request: InferRequest) -> InferResult:
        result = InferResult("m", "1", request.id, [])
        result._release = lambda: released.append(request.id)
        assert request.respond is not None
        request.respond(result)
        return result

    return infer


def test_an_edge_that_answers_itself_gets_the_answer_before_infer_returns() -> None:
    released: list[str] = []
    sent: list[str] = []
    request = InferRequest("m", "1", "e", [])

    def encode(result: InferResult) -> str:
        assert released == []  # encoded before the memory goes back
        return result.id

    returned = asyncio.run(
        answer_request(request, None, answered_early(released), encode, finishing, sent.append)
    )
    assert (returned, sent, released) == (None, ["e"], ["e"])


def test_an_answer_that_cannot_be_encoded_early_fails_on_the_requests_own_path() -> None:
    released: list[str] = []
    sent: list[str] = []
    request = InferRequest("m", "1", "f", [])

    def encode(result: InferResult) -> str:
        raise ValueError("unencodable")

    with pytest.raises(ValueError, match="unencodable"):
        asyncio.run(
            answer_request(request, None, answered_early(released), encode, finishing, sent.append)
        )
    assert (sent, released) == ([], ["f"])  # nothing sent; the memory went back once


def test_a_request_never_answered_early_is_encoded_and_returned() -> None:
    released: list[str] = []
    sent: list[str] = []
    request = InferRequest("m", "1", "g", [])
    returned = asyncio.run(
        answer_request(request, None, served(released), lambda r: r.id, finishing, sent.append)
    )
    assert (returned, sent, released) == ("g", [], ["g"])
    assert request.respond is not None  # offered; the instance did not use it
