"""Waiting for a started worker to connect: its link once it said hello, or how it ended if it
exited (or the time ran out) first. For model instances and the auto-complete worker alike."""

from __future__ import annotations

import asyncio
from typing import Any

from pbd.errors import unavailable
from pbd.worker.launcher import InstanceLauncher, WorkerHandle
from pbd.worker.link import WorkerLink


async def connected_or_exited(
    launcher: InstanceLauncher,
    handle: WorkerHandle,
    connected: asyncio.Future[WorkerLink],
    timeout: float,
    what: str,
) -> WorkerLink:
    """The link of the worker ``handle`` started, once it said hello; UNAVAILABLE naming
    how it ended if it exited (or ``timeout`` passed) first (``permanent`` when retrying
    would not help)."""
    exited = asyncio.ensure_future(launcher.wait(handle, timeout))
    racing: set[asyncio.Future[Any]] = {connected, exited}
    done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
    if connected in done:
        exited.cancel()
        link = connected.result()
        assert link.hello is not None  # the hub hands over a link after its hello
        launcher.attached(handle, link.pid, link.hello.token)
        return link
    connected.cancel()
    status = exited.result()
    how = status.describe() if status else "did not connect in time"
    error = unavailable(f"{what} {how} before connecting")
    error.permanent = status is not None and status.permanent
    raise error
