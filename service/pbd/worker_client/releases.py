"""Batches whose outputs the worker may free, told to it without a frame of their own.

When the daemon is done with a batch's outputs (the response left), the worker may reuse the
blocks they occupy. Under load the ids ride on the next Execute; an idle worker is told with a
``Release`` frame after ``RELEASE_DELAY_S``, so a quiet instance still gets its memory back.
A decoupled request's streamed responses on the direct path are paced: the worker's sender
waits once ``RESPONSES_AHEAD`` of them are out unreleased (``pbd_worker.live_requests``). A
release that brings a request's count (``Outstanding``) to that is told on the loop's next
turn, not after the delay, which would otherwise be the stream's pace; below it, the worker
is not waiting, and releases wait as a batch's do (a model that takes a millisecond a token
costs no more Release frames than before).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pbd_wire import RESPONSES_AHEAD

RELEASE_DELAY_S = 0.002


class Outstanding:
    """A paced request's streamed responses that arrived with outputs and whose release has
    not been told to the worker yet (as the worker counts them, less those on their way)."""

    __slots__ = ("outstanding",)

    def __init__(self) -> None:
        self.outstanding = 0


class PendingReleases:
    def __init__(self, send: Callable[[list[int]], None]) -> None:
        self._send = send  # a Release frame with these ids, for when no Execute came
        self._ids: list[int] = []
        self._timer: asyncio.Handle | None = None
        self._owners: list[Outstanding] = []  # of the ids above that are paced responses
        self._soon = False  # the timer is the next turn's, not RELEASE_DELAY_S's
        self._loop: asyncio.AbstractEventLoop | None = None  # asked once: a getpid() each time

    def add(self, batch_id: int, owner: Outstanding | None = None) -> None:
        """``batch_id`` may be freed; ``owner``: the paced request it is a response of."""
        self._ids.append(batch_id)
        soon = False
        if owner is not None:
            self._owners.append(owner)
            soon = owner.outstanding >= RESPONSES_AHEAD
        if self._soon or (self._timer is not None and not soon):
            return
        if self._timer is not None:
            self._timer.cancel()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if soon:
            self._soon = True
            self._timer = self._loop.call_soon(self._flush)
        else:
            self._timer = self._loop.call_later(RELEASE_DELAY_S, self._flush)

    def take(self) -> list[int]:
        """The ids to put on an Execute about to be sent (none are left pending)."""
        ids, self._ids = self._ids, []
        owners, self._owners = self._owners, []
        for owner in owners:
            owner.outstanding -= 1
        return ids

    def _flush(self) -> None:
        self._timer = None
        self._soon = False
        if self._ids:
            self._send(self.take())
