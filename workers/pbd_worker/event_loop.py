"""The worker's asyncio event loop, run on the main thread while it waits for the daemon.

A model's coroutines (``async def execute``, tasks it creates, ``async_exec`` BLS calls) run on
one event loop, as Triton's stub runs them on one loop per instance. The worker stays
single-threaded: the loop runs only while the main thread would otherwise wait for a frame,
and it watches the daemon's socket itself (``add_reader``), so a BLS reply resumes the
coroutine that awaits it without a thread in between. Frames for the main loop (an Execute, a
Cancel, a Release) read meanwhile are kept for ``next``.

- ``next()``: the main loop's next frame. With no coroutine alive this is a plain blocking read
  (``DaemonLink.next``): a model without coroutines pays nothing for the loop.
- ``run(awaitable)``: a default-mode ``async def execute`` is awaited before its batch is
  answered (Triton awaits it too); frames read meanwhile wait in ``next``.
- ``spawn(coroutine, failed)``: a decoupled ``async def execute`` runs in the background and
  the next batch starts at once; ``failed(exception)`` hears of a coroutine that raised or was
  cancelled (the executor then closes its requests).
- ``reply(key)``: awaited by ``async_exec``; resolved when the reply is filed, whoever read it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from pbd_wire import worker_pb2 as wpb
from pbd_worker.ipc.daemon_link import DaemonLink

log = logging.getLogger("pbd_worker")

Failed = Callable[[BaseException], None]


class WorkerLoop:
    def __init__(self, link: DaemonLink) -> None:
        self.link = link
        self.loop = asyncio.new_event_loop()
        self._kept: collections.deque[wpb.DaemonToWorker] = collections.deque()
        self._closed = False  # the daemon closed the connection (until the next one)
        self._arrived: asyncio.Future[None] | None = None  # what ``next`` waits for
        self._waiters: list[asyncio.Future[None]] = []  # ``reply`` calls waiting
        self._tasks: set[asyncio.Task[Any]] = set()  # spawned ones (the loop holds weak refs)
        self._used = False  # a coroutine ever ran: the model may have left tasks behind
        link.woke = self._woke

    # -- the main loop's side ------------------------------------------------------------------

    def next(self) -> wpb.DaemonToWorker | None:
        """The next frame for the main loop; None when the daemon closed the connection."""
        if not self._kept and not self._closed and not self._alive():
            return self.link.next()
        if not self._kept and not self._closed:
            self._arrived = self.loop.create_future()
            try:
                self._read_ready()
                if not self._arrived.done():
                    self._run_reading(self._arrived)
            finally:
                self._arrived = None
        if self._kept:
            return self._kept.popleft()
        self._closed = False  # reported once; a reconnected link starts afresh
        return None

    def _alive(self) -> bool:
        """Coroutines wait on the loop: ours, or tasks the model created itself."""
        return self._used and bool(self._tasks or asyncio.all_tasks(self.loop))

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Await ``awaitable`` on the loop, reading the daemon's frames meanwhile."""
        self._used = True
        return self._run_reading(asyncio.ensure_future(awaitable, loop=self.loop))

    def spawn(self, coroutine: Coroutine[Any, Any, Any], failed: Failed) -> None:
        """Run ``coroutine`` as a task of its own, in the current context (contextvars)."""
        self._used = True
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._finished(done, failed))

    def _finished(self, task: asyncio.Task[Any], failed: Failed) -> None:
        self._tasks.discard(task)
        problem: BaseException | None = (
            asyncio.CancelledError() if task.cancelled() else task.exception()
        )
        if problem is not None:
            failed(problem)

    def _run_reading(self, until: asyncio.Future[Any]) -> Any:
        sock = self.link.sock
        if sock is None or self._closed:
            return self.loop.run_until_complete(until)
        fd = sock.fileno()
        self.loop.add_reader(fd, self._read_ready)
        try:
            return self.loop.run_until_complete(until)
        finally:
            self.loop.remove_reader(fd)

    def _read_ready(self) -> None:
        """Read the frames that are here: replies wake their waiters, others are kept."""
        try:
            while (message := self.link.read_ready()) is not None:
                self._kept.append(message)
        except EOFError:
            self._closed = True
            if self.link.sock is not None:  # readable for ever now: stop watching it
                self.loop.remove_reader(self.link.sock.fileno())
        if (self._kept or self._closed) and self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _woke(self) -> None:
        """Another thread read frames (``DaemonLink.wait_reply``): look again, on the loop."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._read_ready)

    # -- the coroutines' side --------------------------------------------------------------------

    async def reply(self, key: tuple[str, int]) -> wpb.DaemonToWorker:
        """The reply filed under ``key`` (a BLS call), once whoever reads frames filed it."""
        while True:
            found = self.link.take_reply(key)
            if found is not None:
                return found
            if self._closed:
                raise RuntimeError("the daemon closed the connection")
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            await waiter
