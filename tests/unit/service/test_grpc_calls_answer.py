"""pbd.grpc.calls: a unary handler that answers before it returns (``Context.answer``), and a
finished call that leaves nothing for the cycle collector."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_calls_peer import abort, call, code, echo, message, run_calls, unary
from h2_peer import Peer

from pbd.grpc import calls as calls_module
from pbd.grpc.calls import Calls
from pbd.grpc.protocol import Context

EARLY_DONE: list[bytes] = []  # what _early did after it had answered


async def _early(request: bytes, context: Context) -> None:
    """Answers before it returns, then goes on (as ModelInfer's bookkeeping does)."""
    context.answer(b"early " + request)
    await asyncio.sleep(0.05)
    EARLY_DONE.append(request)
    return None


async def _silent(request: bytes, context: Context) -> None:
    return None


METHODS = {
    b"/t/Echo": unary(echo),
    b"/t/Abort": unary(abort),
    b"/t/Early": unary(_early),
    b"/t/Silent": unary(_silent),
}


def run(test: Callable[[Peer, Calls], Awaitable[None]], **limits: Any) -> None:
    run_calls(METHODS, test, **limits)


def test_a_handler_may_answer_before_it_returns() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        EARLY_DONE.clear()
        got = await call(peer, b"/t/Early", message(b"x"))
        assert got.messages == [b"early x"] and got.status == (0, "")
        assert EARLY_DONE == []  # the answer came before the handler finished
        await asyncio.sleep(0.2)
        assert EARLY_DONE == [b"x"] and calls.active == 0
        assert (await call(peer, b"/t/Echo", message(b"y"), stream=3)).messages == [b"y"]

    run(test)


def test_a_handler_that_returns_no_answer_fails_the_call() -> None:
    async def test(peer: Peer, calls: Calls) -> None:
        got = await call(peer, b"/t/Silent", message(b"x"))
        assert got.status == (code(grpc.StatusCode.INTERNAL), "The handler returned no answer")

    run(test)


def test_only_a_unary_call_can_answer_early() -> None:
    context = Context([])
    with pytest.raises(RuntimeError, match="unary"):
        context.answer(b"x")


def test_a_finished_call_is_freed_without_the_cycle_collector() -> None:
    """Nothing of a call outlives it in a reference cycle (stream, deframer, context and the
    handler's task all let go of it): under load, cycles made the collector run every few
    dozen calls."""

    def live_calls() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is calls_module.Call)

    async def test(peer: Peer, calls: Calls) -> None:
        for stream, path in enumerate((b"/t/Echo", b"/t/Early", b"/t/Abort"), start=0):
            await call(peer, path, message(b"x"), stream=2 * stream + 1)
        await asyncio.sleep(0.1)  # the handlers' tasks finish
        assert live_calls() == 0

    gc.collect()
    gc.disable()
    try:
        run(test)
    finally:
        gc.enable()
