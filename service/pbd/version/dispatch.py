"""Choosing an instance of a model version for each request (or batch) and running it there.

Two ways, by what the version's scheduler is:

- **Granted** (Triton's default scheduler: one request per ``execute``, in arrival order). The
  request's own task runs it. If the queue is empty and an instance has room in its pipeline
  (``--worker-pipeline-depth`` batches sent and not answered), the request takes that room at
  once: no queue entry, no dispatcher task, no second task per request. Otherwise it waits in
  the queue (priority levels, ``max_queue_size``, queue timeouts all apply there) until an
  instance frees room; the instance's result frame frees it and *grants* the room to the head
  of the queue in the same loop iteration, sending that request's Execute there and then
  (``_hand_off``): its task wakes once, for the result. (An instance with an execute timeout
  is sent its requests by their own tasks, which wait for it.)
- **Batched** (the dynamic and the sequence batcher). One dispatcher task per version asks the
  scheduler for the next batch and the instance to run it on, and runs each batch in a task of
  its own, so that the next batch forms while this one runs.

Room on an instance (``instance.batches.inflight``, ``pbd.instance.inflight``) is taken here
when a request or batch is given to it and given back by the instance when the worker's result
comes (or the batch fails before it was sent, or the worker dies): a caller that gives up does
not free room its request still takes in the worker. The instances are the supervisor's
(``pbd.version.supervisor``): the dispatch only picks among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from pbd.errors import PbdError, unavailable
from pbd.instance.inflight import InFlight
from pbd.instance.instance import Instance
from pbd.instance.records import NotSent, State
from pbd.scheduling.scheduler import Batch, Scheduler, WorkItem, wait_result
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.types import InferResult, PreparedRequest
from pbd.version.supervisor import Supervisor

log = logging.getLogger("pbd.instances")
# How often a granted queue is looked at when nothing said it changed (safety net: an
# instance that became ready without telling, a request whose grant was lost to a race).
RECHECK_S = 0.1


class Dispatch:
    def __init__(
        self,
        name: str,
        queue: Scheduler[Instance],
        supervisor: Supervisor,
        stats: ModelStats,
        settings: Settings,
    ) -> None:
        self.name = name  # "<model>/<version>", for the log
        self.queue = queue
        self.slots = supervisor.slots  # the version's instances, live or not
        self.instance_names = supervisor.instance_names  # those that run or will run again
        self.stats = stats
        self.granted = queue.grants
        self.depth = settings.worker_pipeline_depth if queue.pipelined else 1
        self.stopping = False
        self._granting = False  # in _grant (see there)
        # Requests the queue's grant sent to an instance itself, by the future their task
        # waits on (``_hand_off``); the task takes its entry when it wakes.
        self._sent: dict[asyncio.Future[Any], _Sent] = {}
        self._capacity = asyncio.Event()  # set when an instance may take more work
        self._queued = asyncio.Event()  # set when a request is queued (the safety net looks)
        self._running: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None

    # -- placement: what the schedulers see ----------------------------------------------------

    def available(self) -> list[Instance]:
        """Ready instances with room in their pipeline, least loaded first."""
        depth = self.depth
        ready = [
            i
            for i in (s.instance for s in self.slots)
            if i.state is State.READY and not i.draining and not i.warming and busy(i) < depth
        ]
        if len(ready) > 1:
            ready.sort(key=busy)
        return ready

    async def wait_capacity(self) -> None:
        self._capacity.clear()
        with contextlib.suppress(TimeoutError):  # asyncio.timeout: see PriorityQueues.wait_changed
            async with asyncio.timeout(RECHECK_S):
                await self._capacity.wait()

    def on_capacity(self) -> None:
        """An instance has room again (a result came, one started or restarted)."""
        if self.granted:
            self._grant()
        else:
            self._capacity.set()

    # -- start and stop -----------------------------------------------------------------------

    def start(self) -> None:
        loop = self._granted_loop() if self.granted else self._batched_loop()
        self._task = asyncio.create_task(loop, name=f"dispatch {self.name}")

    async def stop(self) -> None:
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- granted: the request's own task runs it ------------------------------------------------

    async def infer(self, prepared: PreparedRequest) -> InferResult:
        """Run one request (granted) or queue it for the dispatcher (batched)."""
        if not self.granted:
            return await wait_result(self._submit(prepared))
        began = time.perf_counter_ns()
        while True:
            instance = self._free_instance() if self.queue.empty() else None
            if instance is None:
                future = self._submit(prepared)
                self._grant()  # room may be free behind requests whose callers gave up
                granted = await self._wait_grant(future)
                if isinstance(granted, _Sent):  # sent from the queue: this is its result
                    outcomes = await granted.instance.outcomes(granted.flight, granted.result)
                    return _returned(outcomes[0])
                instance = granted
            self._dispatched(prepared, instance, time.perf_counter_ns() - began)
            try:
                outcome = (await instance.execute([prepared], in_order=False))[0]
            except NotSent:
                if self.stopping:
                    raise
                continue  # never reached that worker: wait for another (it is being replaced)
            return _returned(outcome)

    def _dispatched(self, prepared: PreparedRequest, instance: Instance, queued_ns: int) -> None:
        """``prepared`` goes to ``instance`` after ``queued_ns`` in the queue."""
        self.stats.queue.add(queued_ns)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: request given to instance %s (%d batch(es) there)",
                      self.name, instance.plan.name, instance.batches.inflight)  # fmt: skip
        trace = prepared.request.trace
        if trace is not None:
            trace.dispatched(instance.plan.name, 1, instance.version)

    def _submit(self, prepared: PreparedRequest) -> asyncio.Future[Any]:
        future = self.queue.submit(prepared)
        self._queued.set()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %d request(s) waiting", self.name, len(self.queue))
        return future

    def _free_instance(self) -> Instance | None:
        """The least loaded instance with room, its room taken; None when all are full."""
        best: Instance | None = None
        least = self.depth
        for slot in self.slots:
            instance = slot.instance
            inflight = busy(instance)
            if (
                inflight < least
                and instance.state is State.READY
                and not instance.draining
                and not instance.warming
            ):
                best, least = instance, inflight
        if best is not None:
            best.batches.inflight += 1
        return best

    async def _wait_grant(self, future: asyncio.Future[Any]) -> Instance | _Sent:
        """Wait in the queue until an instance's room is granted to this request: the
        instance, for the request's task to run it there; or, when the grant sent it as
        well (``_hand_off``), its result."""
        try:
            granted = await future
        except asyncio.CancelledError:
            sent = self._sent.pop(future, None)
            if sent is not None:  # in its worker: the instance lets it go when it is done
                sent.instance.batches.abandon(sent.batch_id, sent.flight)
            elif future.done() and not future.cancelled() and future.exception() is None:
                # Granted just as the caller gave up: hand the room on.
                room: Instance = future.result()
                room.batches.inflight -= 1
                self._grant()
            raise
        except BaseException:
            self._sent.pop(future, None)
            raise
        sent = self._sent.pop(future, None)
        if sent is not None:
            sent.result = granted
            return sent
        instance: Instance = granted
        return instance

    def _grant(self) -> None:
        """Give free room to the requests at the head of the queue, in order. Not
        re-entered: a send that fails frees room (``on_capacity``), and this loop looks
        again anyway."""
        if self._granting:
            return
        self._granting = True
        try:
            queue = self.queue
            while not queue.empty():
                instance = self._free_instance()
                if instance is None:
                    return
                head = queue.pop_head()
                if head is None:  # only requests whose callers gave up were left
                    instance.batches.inflight -= 1
                    return
                if instance.execute_timeout > 0:
                    head.future.set_result(instance)  # its task runs it, timed
                else:
                    self._hand_off(head, instance)
        finally:
            self._granting = False

    def _hand_off(self, item: WorkItem, instance: Instance) -> None:
        """Send the granted request to ``instance`` here, in the turn that freed the room
        (a result being read), instead of waking its task to send it: the task wakes once,
        for the result, which answers the future it waits on. A request that never reached
        the worker goes back to the head of the queue (NotSent: the instance is going), or
        fails (any other refusal, or NotSent while the version stops)."""
        prepared = item.prepared
        try:
            batch_id, flight = instance.send([prepared], in_order=False, future=item.future)
        except NotSent as exc:
            if self.stopping:
                item.future.set_exception(exc)
            else:
                self.queue.requeue(Batch(instance, [item]))
                self._queued.set()
            return
        except PbdError as exc:
            item.future.set_exception(exc)
            return
        self._sent[item.future] = _Sent(instance, batch_id, flight)
        queued_ns = int((item.future.get_loop().time() - item.enqueued_at) * 1e9)
        self._dispatched(prepared, instance, queued_ns)

    async def _granted_loop(self) -> None:
        """Safety net only: results grant room as they come. It looks while requests wait,
        and sleeps while none does (an idle daemon does not wake for it)."""
        while True:
            if self.queue.empty():
                self._queued.clear()
                await self._queued.wait()
            await asyncio.sleep(RECHECK_S)
            self._grant()

    # -- batched: a dispatcher task forms batches ------------------------------------------------

    async def _batched_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.queue.next_batch(self)
            instance = batch.instance
            instance.batches.inflight += 1
            now = loop.time()
            for item in batch.items:
                self.stats.queue.add(int((now - item.enqueued_at) * 1e9))
                trace = item.prepared.request.trace
                if trace is not None:
                    trace.dispatched(instance.plan.name, len(batch.items), instance.version)
            task = asyncio.create_task(self._run_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: Batch[Instance]) -> None:
        instance = batch.instance
        outcomes: list[InferResult | PbdError]
        try:
            outcomes = await instance.execute([item.prepared for item in batch.items])
        except NotSent as exc:
            outcomes = [exc] * len(batch.items)
            if not self.stopping and not all(i.future.done() for i in batch.items):
                # Not executed anywhere: it goes back to the head of the queue.
                self.queue.requeue(batch)
                return
        except PbdError as exc:
            outcomes = [exc] * len(batch.items)
        except BaseException as exc:
            outcomes = [unavailable(instance.reason or f"{instance.describe()} stopped")] * len(
                batch.items
            )
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("executing on %s failed", instance.describe())
        self.queue.deliver(batch, outcomes)


def busy(instance: Instance) -> int:
    """The batches ``instance`` has in its worker, as far as choosing goes: one at least
    while it waits on a BLS call it made (it is in execute(), perhaps for a request a front end
    sent it directly, which the daemon does not count)."""
    inflight = instance.batches.inflight
    return inflight if inflight or not instance.calling else 1


@dataclass(slots=True)
class _Sent:
    """A request the grant sent from the queue (``Dispatch._hand_off``), and its result."""

    instance: Instance
    batch_id: int
    flight: InFlight
    result: Any = None


def _returned(outcome: InferResult | PbdError) -> InferResult:
    if isinstance(outcome, PbdError):
        raise outcome
    return outcome
