"""Deadlines of the calls in flight (``grpc-timeout``), with one timer for all of them.

A timer per call costs a heap push, a cancel and the heap's cleanup of the cancelled handle on
every call that ends in time, which is nearly every one. Here a call's deadline goes into a
dict and a heap; a single timer waits for the earliest deadline and is only re-armed when a
call comes with an earlier one than it waits for. When it fires, the calls past their
deadline come off the top of the heap, in order, and the timer waits for the next earliest:
the work is proportional to the calls that expire, not to the calls in flight. A call that
ends in time leaves its heap entry behind (found stale when it comes up); the heap is rebuilt
from the live deadlines once stale entries outnumber them, so it stays within twice the calls
in flight. With equal timeouts (a client's usual), a timer is armed about once per timeout,
whatever the call rate.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

# Below this many entries the heap is never rebuilt (a rebuild would cost more than it saves).
_REBUILD_FROM = 64


class Deadlines:
    def __init__(self) -> None:
        self._due: dict[object, tuple[float, int, Callable[[], None]]] = {}
        self._heap: list[tuple[float, int, object]] = []
        self._order = itertools.count()  # ties by arrival; keys are never compared
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
        order = next(self._order)
        self._due[key] = (at, order, expire)
        heapq.heappush(self._heap, (at, order, key))
        if self._timer is None or at < self._timer_at:
            self._arm(loop, at)

    def discard(self, key: object) -> None:
        # The timer stays armed even when no call is left: at one call in flight, cancelling
        # it would make every call arm a new one. It fires once, finds nothing due, and stops.
        if self._due.pop(key, None) is not None and len(self._heap) > max(
            _REBUILD_FROM, 2 * len(self._due)
        ):
            self._heap = [(at, order, key) for key, (at, order, _) in self._due.items()]
            heapq.heapify(self._heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + 1e-6  # the loop may run a timer a clock tick early
        due = self._due
        # self._heap, not a local: an expiry may end other calls, and so rebuild the heap.
        while self._heap and self._heap[0][0] <= now:
            _, order, key = heapq.heappop(self._heap)
            entry = due.get(key)
            if entry is not None and entry[1] == order:  # not stale, not re-added since
                del due[key]
                entry[2]()
        while self._heap:
            at, order, key = self._heap[0]
            entry = due.get(key)
            if entry is not None and entry[1] == order:
                if self._timer is None or at < self._timer_at:
                    self._arm(loop, at)
                return
            heapq.heappop(self._heap)
