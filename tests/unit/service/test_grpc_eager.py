"""pbd.grpc.eager: a coroutine run to where it first waits, then finished by a task, behaves
as if the task had run it from the start (results, errors, cancellation, context)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from pbd.grpc.eager import Started, start

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """The test, on an event loop of its own."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())

    return wrapper


def _start(coro: Any, context: contextvars.Context | None = None) -> asyncio.Task[Any]:
    context = context or contextvars.copy_context()
    waiting = context.run(coro.send, None)
    return asyncio.get_running_loop().create_task(Started(coro, waiting), context=context)


@run
async def test_runs_synchronously_up_to_the_first_wait_then_in_the_task() -> None:
    steps: list[str] = []
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler() -> int:
        steps.append("before")
        value = await future
        steps.append("after")
        value += await asyncio.sleep(0, 1)
        return value

    task = _start(handler())
    assert steps == ["before"]  # ran at once, not on the loop's next turn
    future.set_result(41)
    assert await task == 42
    assert steps == ["before", "after"]


@run
async def test_errors_after_the_wait_reach_the_task() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler() -> int:
        await future
        raise ValueError("bad")

    task = _start(handler())
    future.set_result(1)
    with pytest.raises(ValueError, match="bad"):
        await task


@run
async def test_cancelling_the_task_cancels_the_awaited_future_and_the_coroutine_sees_it() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def handler() -> str:
        try:
            await future
        except asyncio.CancelledError:
            seen.append("cancelled")
            return "cleaned up"  # the call's own handling (pbd.grpc.calls) answers, no raise
        return "not cancelled"

    task = _start(handler())
    await asyncio.sleep(0)  # the task now waits on the future
    task.cancel()
    assert await task == "cleaned up"
    assert future.cancelled()
    assert seen == ["cancelled"]


@run
async def test_cancelled_before_its_first_step_the_coroutine_still_sees_it() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def handler() -> int:
        try:
            return await future
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = _start(handler())
    task.cancel()  # before the task ran at all: a client's reset in the same read
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    # As a task waiting on it would have: a queue skips a cancelled entry (pbd.version.dispatch).
    assert future.cancelled()


@run
async def test_awaiting_it_goes_on_where_the_coroutine_stopped() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler() -> int:
        return await future + 1

    coro = handler()
    started = Started(coro, coro.send(None))

    async def outer() -> int:
        return await started

    task = asyncio.get_running_loop().create_task(outer())
    await asyncio.sleep(0)
    future.set_result(1)
    assert await task == 2


@run
async def test_context_changes_stay_with_the_call() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler() -> tuple[str, str]:
        VAR.set("call")
        first = VAR.get()
        await future
        return first, VAR.get()

    task = _start(handler())
    assert VAR.get() == "unset"  # the caller's context is untouched
    future.set_result(None)
    assert await task == ("call", "call")


@run
async def test_closing_an_unfinished_task_closes_the_coroutine() -> None:
    closed: list[bool] = []
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler() -> None:
        try:
            await future
        finally:
            closed.append(True)

    coro = handler()
    started = Started(coro, coro.send(None))
    assert started.send(None) is future  # the first step: what it waits for
    started.close()
    assert closed == [True]


@run
async def test_start_runs_to_the_first_wait_in_a_context_of_its_own() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    seen: list[str] = []

    async def waits() -> None:
        VAR.set("inside")
        seen.append(VAR.get())
        await future
        seen.append(VAR.get())

    async def does_not_wait() -> None:
        seen.append("at once")

    assert start(loop, does_not_wait()) is None  # finished: no task
    task = start(loop, waits())
    assert task is not None and seen == ["at once", "inside"]
    assert VAR.get() == "unset"  # the caller's context is not the coroutine's
    future.set_result(None)
    await task
    assert seen == ["at once", "inside", "inside"]
