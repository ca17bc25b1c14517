"""Batches whose outputs the worker may free, told to it without a frame of their own.

When the daemon is done with a batch's outputs (the response left), the worker may reuse the
blocks they occupy. Under load the ids ride on the next Execute; an idle worker is told with a
``Release`` frame after ``RELEASE_DELAY_S``, so a quiet instance still gets its memory back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

RELEASE_DELAY_S = 0.002


class PendingReleases:
    def __init__(self, send: Callable[[list[int]], None]) -> None:
        self._send = send  # a Release frame with these ids, for when no Execute came
        self._ids: list[int] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # asked once: a getpid() each time

    def add(self, batch_id: int) -> None:
        self._ids.append(batch_id)
        if self._timer is None:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._timer = self._loop.call_later(RELEASE_DELAY_S, self._flush)

    def take(self) -> list[int]:
        """The ids to put on an Execute about to be sent (none are left pending)."""
        ids, self._ids = self._ids, []
        return ids

    def _flush(self) -> None:
        self._timer = None
        if self._ids:
            self._send(self.take())
