"""Deadlines of the calls in flight (``grpc-timeout``), with one timer for all of them.

A timer per call costs a heap push, a cancel and the heap's cleanup of the cancelled handle on
every call that ends in time, which is nearly every one. Here a call's deadline goes into a
dict; a single timer waits for the earliest deadline and is only re-armed when a call comes
with an earlier one than it waits for. When it fires, every call past its deadline expires
and the timer waits for the next earliest (if any call is left). With equal timeouts (a
client's usual), a timer is armed about once per timeout, whatever the call rate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadlines:
    def __init__(self) -> None:
        self._due: dict[object, tuple[float, Callable[[], None]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        return len(self._due)

    def add(
        self,
        loop: asyncio.AbstractEventLoop,
        key: object,
        timeout: float,
        expire: Callable[[], None],
    ) -> None:
        """``expire()`` runs ``timeout`` seconds from now on ``loop`` unless :meth:`discard`
        comes first."""
        at = loop.time() + timeout
        self._due[key] = (at, expire)
        if self._timer is None or at < self._timer_at:
            self._arm(loop, at)

    def discard(self, key: object) -> None:
        # The timer stays armed even when no call is left: at one call in flight, cancelling
        # it would make every call arm a new one. It fires once, finds nothing due, and stops.
        self._due.pop(key, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + 1e-6  # the loop may run a timer a clock tick early
        due = sorted(  # earliest first (the index keeps keys from being compared)
            (at, n, key) for n, (key, (at, _)) in enumerate(self._due.items()) if at <= now
        )
        for _, _, key in due:
            entry = self._due.pop(key, None)  # an earlier expiry may have ended this call
            if entry is not None:
                entry[1]()
        if self._due and self._timer is None:
            self._arm(loop, min(at for at, _ in self._due.values()))
