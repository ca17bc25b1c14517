"""The model hooks the daemon drives on a running instance: ``is_ready()`` and ``finalize()``.

``is_ready()`` (optional, sync or async) answers ModelReady. The worker runs it between
batches, so the daemon asks an instance at most once per ``READY_CACHE_S`` and callers that
arrive while a question is out share its answer: a flood of ModelReady costs the worker one
call a second. A model without the hook is ready while its worker lives (the first answer
says so, and it is not asked again). An instance busy executing answers after its batch; if
that takes longer than ``READY_TIMEOUT_S`` (Triton's 5 s), its last answer stands, while an
idle instance that does not answer in time is not ready. A hook that raises or returns a
non-bool makes the instance not ready, and a version is ready only if every live instance is.

``finalize()`` runs at unload; one that has not returned after ``--model-finalize-timeout-secs``
gets its worker killed, and one that raises is logged with its traceback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from pbd.errors import PbdError
from pbd.instance.inflight import InFlightBatches
from pbd.worker.link import WorkerLink
from pbd_wire import worker_pb2 as wpb

log = logging.getLogger("pbd.instances")
READY_CACHE_S = 1.0
READY_TIMEOUT_S = 5.0


class ReadinessProbe:
    """One instance's ``is_ready()``, asked sparingly."""

    def __init__(self, description: str, batches: InFlightBatches) -> None:
        self.description = description
        self.batches = batches  # a busy instance answers after its batch
        self.hooked: bool | None = None  # None: not asked yet
        self.ready = True
        self._asked_at = float("-inf")
        self._queries = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[wpb.ReadyReply]] = {}
        self._asking: asyncio.Future[bool] | None = None

    def answered(self, reply: wpb.ReadyReply) -> None:
        """The worker's ReadyReply (the instance's reader hands it over)."""
        future = self._waiting.pop(reply.query, None)
        if future is not None and not future.done():
            future.set_result(reply)

    async def check(self, link: WorkerLink | None) -> bool:
        """Whether the instance is ready; ``link``: its worker's, None when it is not live."""
        if link is None:
            return False
        if self.hooked is False:
            return True
        loop = asyncio.get_running_loop()
        if loop.time() - self._asked_at < READY_CACHE_S:
            return self.ready
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask(link))
        return await asyncio.shield(self._asking)

    async def _ask(self, link: WorkerLink) -> bool:
        loop = asyncio.get_running_loop()
        query = next(self._queries)
        future: asyncio.Future[wpb.ReadyReply] = loop.create_future()
        self._waiting[query] = future
        try:
            link.send(wpb.DaemonToWorker(ready_query=wpb.ReadyQuery(query=query)))
            reply = await asyncio.wait_for(future, READY_TIMEOUT_S)
        except TimeoutError:
            busy = self.batches.inflight > 0
            ready = self.ready and busy
            if not busy:
                log.warning(
                    "%s: is_ready() did not answer within %gs", self.description, READY_TIMEOUT_S
                )
        except PbdError:
            ready = False  # the connection is gone
        else:
            self.hooked = reply.hooked
            ready = reply.ready
            if reply.HasField("error"):
                log.warning("%s: %s", self.description, reply.error.message)
        finally:
            self._waiting.pop(query, None)
            self._asking = None
        self.ready = ready
        self._asked_at = loop.time()
        return ready


def log_finalized(description: str, finalized: wpb.Finalized) -> None:
    if finalized.HasField("error"):
        error = finalized.error
        log.error("%s: %s", description, error.message)
        if error.traceback:
            log.error("%s: finalize() traceback:\n%s", description, error.traceback)


async def await_finalize(description: str, disconnected: asyncio.Event, timeout: float) -> None:
    """Wait for the worker to finish finalize() and exit (its connection closes); past
    ``timeout`` say so: the caller then kills the worker."""
    try:
        await asyncio.wait_for(disconnected.wait(), timeout)
    except TimeoutError:
        log.error(
            "%s: finalize() did not return within %gs; killing its worker", description, timeout
        )
