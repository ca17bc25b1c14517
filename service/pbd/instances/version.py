"""One model version: its instances, its queue, loading, unloading and its state.

A version owns a scheduler (``pbd.scheduling``), a :class:`~pbd.instances.dispatch.Dispatch`
that runs its requests on its instances, and a :class:`~pbd.instances.supervisor.Supervisor`
that keeps those instances alive. Load-driven scaling (``scaler``) adds and retires instances.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pbd.errors import Code, PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv, model_worker_env
from pbd.instances.autoscale import ScalingPolicy
from pbd.instances.dispatch import Dispatch
from pbd.instances.hooks import live
from pbd.instances.hub import WorkerHub
from pbd.instances.instance import Instance
from pbd.instances.launcher import InstanceLauncher
from pbd.instances.limits import scaling_policy, version_limits
from pbd.instances.placement import plan_instances
from pbd.instances.records import InstancePlan, State, VersionState
from pbd.instances.scaler import Scaler
from pbd.instances.supervisor import Slot, Supervisor
from pbd.metrics.custom import CustomMetrics
from pbd.repository.backends import backend_dir
from pbd.repository.config import ModelConfig
from pbd.scheduling import Scheduler, make_scheduler
from pbd.settings import Settings
from pbd.stats import ModelStats, failure_reason
from pbd.tracing.provider import Tracing
from pbd.types import InferResult, PreparedRequest

log = logging.getLogger("pbd.instances")


class VersionRuntime:
    # Models this version runs its requests on (an ensemble's steps): unloaded with them.
    depends_on: frozenset[str] = frozenset()

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
        self.queue: Scheduler[Instance] = make_scheduler(
            config, f"model '{config.name}' version {version}", settings.max_queue_size
        )
        self.stats = ModelStats()
        self.execute_timeout = settings.execute_timeout_secs
        self.memory_limit = settings.instance_memory_limit_bytes
        self.slots: list[Slot] = []
        self.dispatch = Dispatch(
            f"{config.name}/{version}",
            self.queue,
            self.instances,
            self.instance_names,
            self.stats,
            settings,
        )
        self.supervisor = Supervisor(
            self.slots, settings, self._new_instance, self.dispatch.on_capacity, self._given_up
        )
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
            on_capacity=self.dispatch.on_capacity,
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
        # Scaled to zero: no slot, or only retired ones whose workers are on their way out
        # (a slot leaves the list only after its worker has exited).
        return self.scaler is not None and all(s.retired for s in self.slots)

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
        self.supervisor.watch(slot)
        self.dispatch.on_capacity()
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

    def _loading(self, step: str) -> None:
        """What loading does now (shown in the index and in systemd's STATUS)."""
        self.reason = f"loading: {step}"

    async def load(self) -> None:
        """Start every instance; on any failure stop the rest and raise the first error."""
        source = str(self.model_dir / "config.pbtxt")
        try:
            plans = plan_instances(self.config, self.gpus)
            limits = version_limits(self.config, self.settings, source)
            self.policy = scaling_policy(self.config, self.settings, plans, source)
            self.reason = "loading: preparing the model's environment"
            self.worker_env = await model_worker_env(
                self.config.parameters,
                self.model_dir,
                self.settings.execution_env_cache_dir,
                self._loading,
                backend_dir(self.config.backend, self.settings.backend_directory),
            )
        except PbdError as exc:
            self.state, self.reason = VersionState.UNAVAILABLE, exc.message
            raise
        self.templates = plans
        self.execute_timeout, self.memory_limit = limits.execute_timeout, limits.memory_limit
        instances = [self._new_instance(p) for p in plans]
        self.reason = f"loading: initialize() of {len(instances)} instance(s)"
        try:
            outcomes = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
        except asyncio.CancelledError:  # shutdown during loading: those that started go too
            await asyncio.gather(*(i.stop(1.0) for i in instances), return_exceptions=True)
            raise
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await asyncio.gather(*(i.stop(1.0) for i in instances), return_exceptions=True)
            first = failures[0]
            error = first if isinstance(first, PbdError) else PbdError(Code.INTERNAL, repr(first))
            self.state, self.reason = VersionState.UNAVAILABLE, error.message
            raise error
        for plan, instance in zip(plans, instances, strict=True):
            slot = Slot(plan, instance)
            self.slots.append(slot)
            self.supervisor.watch(slot)
        self.supervisor.start()
        self.dispatch.start()
        self.state, self.reason = VersionState.READY, ""
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
            result = await self.dispatch.infer(prepared)
        except PbdError as exc:
            self.stats.failed(time.perf_counter_ns() - began, failure_reason(exc))
            raise
        self.stats.success.add(time.perf_counter_ns() - began)
        return result

    async def ready_checked(self) -> bool:
        """ModelReady: the version serves, and every live instance's is_ready() agrees."""
        if not self.ready:
            return False
        live_ones = [i for i in self.instances() if live(i)]
        if not live_ones:
            return True  # scaled to zero on purpose: the next request starts an instance
        answers = await asyncio.gather(*(i.readiness.check() for i in live_ones))
        return all(answers)

    def instance_names(self) -> list[str]:
        return [s.plan.name for s in self.slots if not s.given_up and not s.retired]

    def _given_up(self, reason: str) -> None:
        """Every instance was given up: the version cannot serve."""
        self.state = VersionState.UNAVAILABLE
        self.reason = reason
        self.queue.fail_all(unavailable(reason))

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
        if self.scaler is not None:
            await self.scaler.stop()
        await self.supervisor.stop()
        await self.dispatch.stop()
        gone = unavailable(f"model '{self.config.name}' was unloaded")
        self.queue.fail_all(gone)
        self.reject_waiting(gone)
        await asyncio.gather(
            *(s.instance.stop(max(deadline - loop.time(), 1.0), why) for s in self.slots),
            return_exceptions=True,
        )
        self.state = VersionState.UNAVAILABLE
        self.reason = "unloaded"
