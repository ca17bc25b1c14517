"""The daemon's side of sd_notify: READY=1 once it serves, STATUS= with what it serves,
WATCHDOG=1 from the event loop (a wedged loop misses it and systemd restarts the daemon),
STOPPING=1 on shutdown. All of it is a no-op when systemd did not start us."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from pbd_worker.notify import Notifier

STATUS_INTERVAL_S = 2.0


class DaemonNotifier:
    def __init__(self, status: Callable[[], str], notifier: Notifier | None = None) -> None:
        self.notifier = notifier or Notifier()
        self.status_text = status
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.notifier.enabled

    def start(self) -> None:
        """Begin the watchdog (if the unit has WatchdogSec=) and status updates."""
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="sd_notify")

    async def _loop(self) -> None:
        interval = self.notifier.watchdog_interval_s or STATUS_INTERVAL_S
        interval = min(interval, STATUS_INTERVAL_S)
        last = ""
        while True:
            self.notifier.watchdog()
            text = self.status_text()
            if text != last:
                self.notifier.status(text)
                last = text
            await asyncio.sleep(interval)

    def ready(self) -> None:
        self.notifier.ready(self.status_text())

    async def stopping(self, text: str) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.notifier.stopping(text)

    def close(self) -> None:
        self.notifier.close()
