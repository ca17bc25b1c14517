"""A coroutine started outside any task, handed to one where it first waits.

``asyncio.Task(coro)`` runs nothing of ``coro`` before the loop's next turn (Python 3.12's
eager tasks would; pbd runs on 3.11). A unary call's handler is mostly synchronous until it
waits for its worker, so pbd's front end runs it at once, in the read that completed the
request (``pbd.grpc.calls``; the daemon does the same for a front end's request,
``pbd.fronts.front_link``), and gives a task what is left (:func:`start`). :class:`Started`
is that rest as a coroutine object. Its first ``send`` yields again what the coroutine
yielded where it stopped (the future it waits for), so the task waits on that; every later
``send`` and every ``throw`` (the task's cancellation, even one that comes before the task's
first step) goes to the coroutine, as if the task had run it from the start.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
from collections.abc import Coroutine
from typing import Any


def start(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]
) -> asyncio.Task[Any] | None:
    """Run ``coro`` now, up to where it first waits, in a context of its own (as a task's
    coroutine runs); the task that finishes it, in that context, or None when it finished
    without waiting (its result is not kept: the handlers started this way return None)."""
    context = contextvars.copy_context()
    try:
        waiting = context.run(coro.send, None)
    except StopIteration:
        return None
    return loop.create_task(Started(coro, waiting), context=context)


_NOTHING = object()


class Started(collections.abc.Coroutine[Any, Any, Any]):
    """The rest of ``coro``, suspended where it yielded ``waiting``."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def send(self, value: Any) -> Any:
        waiting = self.waiting
        if waiting is not _NOTHING:  # the task's first step
            self.waiting = _NOTHING
            return waiting
        return self.coro.send(value)

    def throw(self, *exc: Any) -> Any:
        self._let_go()
        return self.coro.throw(*exc)

    def close(self) -> None:
        self._let_go()
        self.coro.close()

    def _let_go(self) -> None:
        """Before the task's first step, a task's cancellation (the only thing it throws
        then) would have cancelled what the coroutine waits on, had the task been waiting on
        it: do that here. Code that waits in a queue relies on it (a request whose future is
        cancelled is skipped, not granted room)."""
        waiting, self.waiting = self.waiting, _NOTHING
        cancel = getattr(waiting, "cancel", None)
        if cancel is not None:
            cancel()

    def __next__(self) -> Any:
        return self.send(None)

    def __await__(self) -> Started:  # type: ignore[override]  # an iterator, as generators are
        return self

    def __repr__(self) -> str:
        return f"<started {self.coro!r}>"
