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

from pbd.batching import DynamicBatcher
from pbd.errors import Code, PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv, model_worker_env
from pbd.instances.autoscale import ScalingPolicy
from pbd.instances.hub import WorkerHub
from pbd.instances.instance import Instance, InstancePlan, NotSent, State
from pbd.instances.launcher import InstanceLauncher
from pbd.instances.limits import scaling_policy, version_limits
from pbd.instances.placement import plan_instances
from pbd.instances.scaler import Scaler
from pbd.metrics.custom import CustomMetrics
from pbd.repository.config import ModelConfig
from pbd.scheduler import Batch, wait_result
from pbd.scheduling import make_scheduler
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
        self.queue = make_scheduler(
            config, f"model '{config.name}' version {version}", settings.max_queue_size
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
        self.templates: list[InstancePlan] = []
        self.policy = ScalingPolicy()
        self.scaler: Scaler | None = None
        self.worker_env: WorkerEnv | None = None  # the model's EXECUTION_ENV_PATH, prepared

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
            worker_env=self.worker_env,
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
        return len(self.queue) + sum(s.instance.inflight for s in self.slots)

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
            self.worker_env = await model_worker_env(
                self.config.parameters, self.model_dir, self.settings.execution_env_cache_dir
            )
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
            future = self.queue.submit(prepared)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: %d request(s) waiting", self.id, len(self.queue))
            result = await wait_result(future)
        except PbdError:
            self.stats.fail.add(time.perf_counter_ns() - began)
            raise
        self.stats.success.add(time.perf_counter_ns() - began)
        return result

    def available(self) -> list[Instance]:
        """Ready instances with room in their pipeline, least loaded first. The dynamic
        batcher hands an instance its next batch only once it is idle, as Triton does: a
        pipelined batch would be formed early and split what could have been one batch."""
        depth = 1 if isinstance(self.queue, DynamicBatcher) else self.settings.worker_pipeline_depth
        ready = [
            s.instance
            for s in self.slots
            if s.instance.state is State.READY
            and not s.instance.draining
            and s.instance.inflight < depth
        ]
        return sorted(ready, key=lambda i: i.inflight)

    def instance_names(self) -> list[str]:
        return [s.plan.name for s in self.slots if not s.given_up and not s.retired]

    async def wait_capacity(self) -> None:
        self._capacity.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._capacity.wait(), 0.1)

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.queue.next_batch(self)
            batch.instance.inflight += 1
            now = loop.time()
            for item in batch.items:
                self.stats.queue.add(int((now - item.enqueued_at) * 1e9))
                if item.prepared.request.trace is not None:
                    item.prepared.request.trace.dispatched(
                        batch.instance.plan.name, len(batch.items)
                    )
            task = asyncio.create_task(self._run_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: Batch) -> None:
        instance = batch.instance
        outcomes: list[InferResult | PbdError]
        try:
            outcomes = await instance.execute([item.prepared for item in batch.items])
        except NotSent as exc:
            outcomes = [exc] * len(batch.items)
            if not self._stopping and not all(i.future.done() for i in batch.items):
                # Not executed anywhere: it goes back to the head of the queue.
                self.queue.requeue(batch)
                return  # (the finally below frees the instance's slot)
        except PbdError as exc:
            outcomes = [exc] * len(batch.items)
        except BaseException as exc:
            outcomes = [unavailable(instance.reason or f"{instance.describe()} stopped")] * len(
                batch.items
            )
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("executing on %s failed", instance.describe())
        finally:
            instance.inflight -= 1
            self._capacity.set()
        self.queue.deliver(batch, outcomes)

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
        """Fail the requests waiting for an instance; how many there were."""
        return self.queue.fail_older_than(float("inf"), error)

    async def unload(self, grace: float, why: str = "") -> None:
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
            *(s.instance.stop(max(deadline - loop.time(), 1.0), why) for s in self.slots),
            return_exceptions=True,
        )
        self.state = VersionState.UNAVAILABLE
        self.reason = "unloaded"
