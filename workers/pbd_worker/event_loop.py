"""The worker's asyncio event loop, run on the main thread while it waits for the daemon.

A model's coroutines (``async def execute``, tasks it creates, ``async_exec`` BLS calls) run on
one event loop, as Triton's stub runs them on one loop per instance. The worker stays
single-threaded: the loop runs only while the main thread would otherwise wait for a frame,
and it watches the daemon's socket itself (``add_reader``), so a BLS reply resumes the
coroutine that awaits it without a thread in between. Frames for the main loop (an Execute, a
Cancel, a Release) read meanwhile are kept for ``next``.

- ``next()``: the main loop's next frame, and where it came from (None: the daemon; or a front
  link, ``ipc.front_connections``). With no coroutine alive this is a plain blocking read
  (``DaemonLink.next``): a model without coroutines pays nothing for the loop. A worker that
  listens for front ends waits on the daemon's socket and theirs at once instead (one poll,
  ``FrontConnections.wait``; the daemon's frames first), and while coroutines are alive the loop
  watches the front links too.
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
from pbd_worker.ipc.front_connections import FrontConnection, FrontConnections

log = logging.getLogger("pbd_worker")

Failed = Callable[[BaseException], None]
# A frame for the main loop and the front link it came on (None: the daemon's).
Arrival = tuple[FrontConnection | None, wpb.DaemonToWorker]


class WorkerLoop:
    def __init__(self, link: DaemonLink, fronts: FrontConnections | None = None) -> None:
        self.link = link
        self.fronts = fronts
        self.loop = asyncio.new_event_loop()
        self._kept: collections.deque[wpb.DaemonToWorker] = collections.deque()
        self._closed = False  # the daemon closed the connection (until the next one)
        self._arrived: asyncio.Future[None] | None = None  # what ``next`` waits for
        self._waiters: list[asyncio.Future[None]] = []  # ``reply`` calls waiting
        self._tasks: set[asyncio.Task[Any]] = set()  # spawned ones (the loop holds weak refs)
        self._used = False  # a coroutine ever ran: the model may have left tasks behind
        link.woke = self._woke

    # -- the main loop's side ------------------------------------------------------------------

    def next(self) -> Arrival | None:
        """The next frame for the main loop and its link; None when the daemon closed the
        connection."""
        fronts = self.fronts
        if not self._kept and not self._closed and not self._alive():
            if fronts is None or not fronts.active:
                message = self.link.next()
                return None if message is None else (None, message)
            while True:  # the daemon's socket and the front links at once
                got = self.link.next_or(fronts.wait)
                if got is None:
                    return None
                if got is not False:
                    return None, got
                taken = fronts.take()
                if taken is not None:
                    return taken
        if not self._kept and not self._closed:
            self._arrived = self.loop.create_future()
            try:
                self._read_ready()  # the daemon's frames first
                if not self._arrived.done() and not (fronts is not None and fronts.ready()):
                    self._run_reading(self._arrived)
            finally:
                self._arrived = None
        if self._kept:
            return None, self._kept.popleft()
        if fronts is not None and (taken := fronts.take()) is not None:
            return taken
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
        fronts = self.fronts if self.fronts is not None and self.fronts.active else None
        if fronts is not None:
            fronts.attach(self.loop, self._front_arrived)
        try:
            return self.loop.run_until_complete(until)
        finally:
            self.loop.remove_reader(fd)
            if fronts is not None:
                fronts.detach()

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

    def _front_arrived(self) -> None:
        """A front link's frame is in its inbox: ``next`` has one to return."""
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

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
