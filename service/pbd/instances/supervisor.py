"""Keeps a model version's instances running and feeds them its queue.

One dispatcher per version hands queued requests to the least-loaded ready instance, keeping
up to ``worker_pipeline_depth`` batches queued at each worker so it never idles waiting for
the daemon's event loop. Each instance slot has a task that restarts a dead worker with
exponential backoff. A crash fails only the request that instance was executing. An instance
whose restart fails ``MAX_RESTART_FAILURES`` times in a row, or whose ``initialize()`` raises,
is given up; a version with no instance left is UNAVAILABLE with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pbd.errors import Code, PbdError, unavailable
from pbd.instances.autoscale import ScalingPolicy
from pbd.instances.hub import WorkerHub
from pbd.instances.instance import Instance, InstancePlan, NotSent, State
from pbd.instances.launcher import InstanceLauncher
from pbd.instances.limits import queue_limit, scaling_policy, version_limits
from pbd.instances.placement import plan_instances
from pbd.instances.scaler import Scaler
from pbd.metrics.custom import CustomMetrics
from pbd.repository.config import ModelConfig
from pbd.scheduler import RequestQueue, WorkItem, wait_result
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.tracing.provider import Tracing
from pbd.types import InferResult
from pbd.validation import PreparedRequest

log = logging.getLogger("pbd.instances")
MAX_RESTART_FAILURES = 5
STABLE_UPTIME_S = 30.0


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


@dataclass
class Slot:
    plan: InstancePlan
    instance: Instance
    task: asyncio.Task[None] | None = None
    given_up: str = ""
    restarts: int = 0
    started_at: float = field(default=0.0)
    retired: bool = False  # the scaler is stopping it: do not restart it


class VersionRuntime:
    def __init__(
        self,
        *,
        config: ModelConfig,
        version: int,
        model_dir: Path,
        settings: Settings,
        launcher: InstanceLauncher,
        hub: WorkerHub,
        shm_name: Callable[[], str],
        gpus: list[int],
        custom_metrics: CustomMetrics | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.config = config
        self.tracing = tracing
        self.version = version
        self.model_dir = model_dir
        self.settings = settings
        self.launcher = launcher
        self.hub = hub
        self.shm_name = shm_name
        self.gpus = gpus
        self.custom_metrics = custom_metrics if custom_metrics is not None else CustomMetrics()
        self.state = VersionState.LOADING
        self.reason = ""
        self.queue = RequestQueue(
            f"model '{config.name}' version {version}", queue_limit(config, settings)
        )
        self.stats = ModelStats()
        self.execute_timeout = settings.execute_timeout_secs
        self.memory_limit = settings.instance_memory_limit_bytes
        self.slots: list[Slot] = []
        self._stopping = False
        self._monitor: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._capacity = asyncio.Event()  # set when an instance may take more work
        self._running: set[asyncio.Task[None]] = set()
        self.held: WorkItem | None = None  # the request the dispatcher waits to place
        self.templates: list[InstancePlan] = []
        self.policy = ScalingPolicy()
        self.scaler: Scaler | None = None

    @property
    def id(self) -> str:
        return f"{self.config.name}/{self.version}"

    def _new_instance(self, plan: InstancePlan) -> Instance:
        return Instance(
            config=self.config,
            version=self.version,
            model_dir=self.model_dir,
            plan=plan,
            settings=self.settings,
            launcher=self.launcher,
            hub=self.hub,
            shm_base=self.shm_name(),
            stats=self.stats,
            execute_timeout=self.execute_timeout,
            custom_metrics=self.custom_metrics,
            tracing=self.tracing,
            memory_limit=self.memory_limit,
        )

    @property
    def serving(self) -> bool:
        """Takes requests: they queue while a crashed instance restarts."""
        return self.state is VersionState.READY

    @property
    def ready(self) -> bool:
        """Has a live instance right now (what ModelReady reports), or is scaled to zero on
        purpose and will start one for the next request."""
        if not self.serving:
            return False
        if any(s.instance.state is State.READY for s in self.slots):
            return True
        return self.scaler is not None and not self.slots

    def load_now(self) -> int:
        """Requests queued or in flight: the signal load-driven scaling samples."""
        return (
            len(self.queue) + (self.held is not None) + sum(s.instance.inflight for s in self.slots)
        )

    def _next_plan(self) -> InstancePlan:
        """A new instance copies the templates round robin (so GPU groups spread over their
        GPUs) under a name no live instance has."""
        template = self.templates[len(self.slots) % len(self.templates)]
        group = template.name.rsplit("_", 1)[0]
        taken = {s.plan.name for s in self.slots}
        n = next(i for i in itertools.count() if f"{group}_{i}" not in taken)
        return InstancePlan(f"{group}_{n}", template.kind, template.device_id)

    async def add_instance(self) -> Instance | None:
        """Start one more instance; it takes work only once initialize() has returned."""
        plan = self._next_plan()
        slot = Slot(plan, self._new_instance(plan))
        self.slots.append(slot)
        try:
            await slot.instance.start()
        except PbdError as exc:
            log.error("could not add %s: %s", slot.instance.describe(), exc.message)
            self.slots.remove(slot)
            return None
        slot.started_at = asyncio.get_running_loop().time()
        slot.task = asyncio.create_task(self._run_slot(slot), name=f"slot {slot.instance.id}")
        self._capacity.set()
        return slot.instance

    async def retire_instance(self, slot: Slot, drain_timeout: float) -> None:
        """Take no new work on ``slot``, let it finish what it has, then stop it."""
        slot.retired = True
        slot.instance.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        while slot.instance.inflight and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if slot.task is not None:
            slot.task.cancel()
        await slot.instance.stop(max(deadline - loop.time(), 1.0))
        if slot in self.slots:
            self.slots.remove(slot)

    def instances(self) -> list[Instance]:
        return [s.instance for s in self.slots]

    async def load(self) -> None:
        """Start every instance; on any failure stop the rest and raise the first error."""
        source = str(self.model_dir / "config.pbtxt")
        try:
            plans = plan_instances(self.config, self.gpus)
            limits = version_limits(self.config, self.settings, source)
            self.policy = scaling_policy(self.config, self.settings, plans, source)
        except PbdError as exc:
            self.state, self.reason = VersionState.UNAVAILABLE, exc.message
            raise
        self.templates = plans
        self.execute_timeout, self.memory_limit = limits.execute_timeout, limits.memory_limit
        instances = [self._new_instance(p) for p in plans]
        outcomes = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await asyncio.gather(*(i.stop(1.0) for i in instances), return_exceptions=True)
            first = failures[0]
            error = first if isinstance(first, PbdError) else PbdError(Code.INTERNAL, repr(first))
            self.state, self.reason = VersionState.UNAVAILABLE, error.message
            raise error
        loop = asyncio.get_running_loop()
        for plan, instance in zip(plans, instances, strict=True):
            slot = Slot(plan, instance, started_at=loop.time())
            slot.task = asyncio.create_task(self._run_slot(slot), name=f"slot {instance.id}")
            self.slots.append(slot)
        self._monitor = asyncio.create_task(self._watch_heartbeats(), name="heartbeats")
        self._dispatcher = asyncio.create_task(self._dispatch(), name=f"dispatch {self.id}")
        self.state = VersionState.READY
        if self.policy.enabled:
            self.scaler = Scaler(self)
            self.scaler.start()

    async def infer(self, prepared: PreparedRequest) -> InferResult:
        if self.state is not VersionState.READY:
            raise unavailable(
                f"Request for unknown model: '{self.config.name}' version {self.version} is not "
                "at ready state"
            )
        began = time.perf_counter_ns()
        if prepared.request.trace is not None:
            prepared.request.trace.queued()
        try:
            held = int(self.held is not None and not self.held.future.done())
            future = self.queue.submit(prepared, also_waiting=held)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: %d request(s) waiting", self.id, len(self.queue) + held)
            result = await wait_result(future)
        except PbdError:
            self.stats.fail.add(time.perf_counter_ns() - began)
            raise
        self.stats.success.add(time.perf_counter_ns() - began)
        return result

    def _pick(self) -> Instance | None:
        """The least-loaded ready instance with room in its pipeline; idle ones first."""
        depth = self.settings.worker_pipeline_depth
        best: Instance | None = None
        for slot in self.slots:
            inst = slot.instance
            ready = inst.state is State.READY and not inst.draining and inst.inflight < depth
            if ready and (best is None or inst.inflight < best.inflight):
                best = inst
        return best

    async def _dispatch(self) -> None:
        while True:
            item = await self.queue.next()
            self.held = item
            while (instance := self._pick()) is None:
                self._capacity.clear()
                try:
                    await asyncio.wait_for(self._capacity.wait(), 0.1)
                except TimeoutError:
                    if item.future.done():
                        break  # timed out at zero instances, or the caller gave up
            self.held = None
            if instance is None:
                continue
            if item.future.done():
                continue  # cancelled while it waited for an instance
            instance.inflight += 1
            waited = asyncio.get_running_loop().time() - item.enqueued_at
            self.stats.queue.add(int(waited * 1e9))
            if item.prepared.request.trace is not None:
                item.prepared.request.trace.dispatched(instance.plan.name, 1)
            task = asyncio.create_task(self._run_one(instance, item))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_one(self, instance: Instance, item: WorkItem) -> None:
        try:
            (outcome,) = await instance.execute([item.prepared])
        except NotSent as exc:
            outcome = exc
            if not item.future.done() and not self._stopping:
                # Not executed anywhere: it goes back to the head of the queue.
                self.queue.requeue(item)
                return  # (the finally below frees the instance's slot)
        except PbdError as exc:
            outcome = exc
        except BaseException as exc:
            outcome = unavailable(instance.reason or f"{instance.describe()} stopped")
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("executing on %s failed", instance.describe())
        finally:
            instance.inflight -= 1
            self._capacity.set()
        if item.future.done():
            if isinstance(outcome, InferResult):
                outcome.release()
        elif isinstance(outcome, PbdError):
            item.future.set_exception(outcome)
        else:
            item.future.set_result(outcome)

    async def _run_slot(self, slot: Slot) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while not self._stopping:
            await slot.instance.died.wait()
            if self._stopping or slot.retired:
                return
            if loop.time() - slot.started_at > STABLE_UPTIME_S:
                backoff = 0.1
            failures = 0
            while not self._stopping:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.restart_backoff_max_secs)
                replacement = self._new_instance(slot.plan)
                slot.instance = replacement
                try:
                    await replacement.start()
                except PbdError as exc:
                    failures += 1
                    initialize_raised = exc.code is not Code.UNAVAILABLE
                    if initialize_raised or exc.permanent or failures >= MAX_RESTART_FAILURES:
                        self._give_up(slot, exc.message)
                        return
                    log.warning(
                        "restart of %s failed (%s); retrying", replacement.describe(), exc.message
                    )
                    continue
                slot.restarts += 1
                slot.started_at = loop.time()
                self._capacity.set()
                log.info("restarted %s (restart %d)", replacement.describe(), slot.restarts)
                break

    def _give_up(self, slot: Slot, reason: str) -> None:
        slot.given_up = reason
        log.error("giving up on %s: %s", slot.instance.describe(), reason)
        if all(s.given_up for s in self.slots):
            self.state = VersionState.UNAVAILABLE
            self.reason = reason
            self.queue.fail_all(unavailable(reason))
            # The request the dispatcher holds while it waits for an instance fails too.
            held = self.held
            if held is not None and not held.future.done():
                held.future.set_exception(unavailable(reason))

    async def _watch_heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await asyncio.sleep(1.0)
            for slot in self.slots:
                if slot.instance.heartbeat_overdue(loop.time()):
                    await slot.instance.kill(
                        f"worker for {slot.instance.describe()} sent no heartbeat for "
                        f"{self.settings.worker_heartbeat_timeout_secs:g}s and was killed"
                    )

    def reject_waiting(self, error: PbdError) -> int:
        """Fail the requests queued or waiting for an instance; how many there were."""
        failed = self.queue.fail_older_than(float("inf"), error)
        if self.held is not None and not self.held.future.done():
            self.held.future.set_exception(error)
            failed += 1
        return failed

    async def unload(self, grace: float) -> None:
        """Stop taking requests, let queued and running ones finish (up to ``grace``), then
        finalize and stop every instance."""
        if self.state is VersionState.READY:
            self.state = VersionState.UNLOADING
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        # Streams count as work: a decoupled request's responses may come after execute().
        while (
            len(self.queue) or any(s.instance.inflight or s.instance.streams for s in self.slots)
        ) and (loop.time() < deadline and any(not s.given_up for s in self.slots)):
            await asyncio.sleep(0.02)
        self._stopping = True
        if self.scaler is not None:
            await self.scaler.stop()
        for task in [s.task for s in self.slots] + [self._monitor, self._dispatcher]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        gone = unavailable(f"model '{self.config.name}' was unloaded")
        self.queue.fail_all(gone)
        self.reject_waiting(gone)
        await asyncio.gather(
            *(s.instance.stop(max(deadline - loop.time(), 1.0)) for s in self.slots),
            return_exceptions=True,
        )
        self.state = VersionState.UNAVAILABLE
        self.reason = "unloaded"
