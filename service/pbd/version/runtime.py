"""One model version: its instances, its queue, loading, unloading and its state.

A version owns a scheduler (``pbd.scheduling``), a :class:`~pbd.version.supervisor.Supervisor`
that starts its instances and keeps them alive, and a :class:`~pbd.version.dispatch.Dispatch`
that runs its requests on them. Load-driven scaling (``scaler``) asks the supervisor for more
or fewer instances.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from pathlib import Path

from pbd.errors import PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv, model_worker_env
from pbd.instance.instance import Instance, InstanceServices
from pbd.instance.records import InstancePlan, State
from pbd.modelconfig.backends import backend_dir
from pbd.modelconfig.model import ModelConfig
from pbd.scheduling import Scheduler, make_scheduler
from pbd.stats import ModelStats, failure_reason
from pbd.types import InferResult, PreparedRequest
from pbd.version.autoscale import ScalingPolicy
from pbd.version.dispatch import Dispatch
from pbd.version.limits import scaling_policy, version_limits
from pbd.version.placement import plan_instances
from pbd.version.scaler import Scaler
from pbd.version.supervisor import Slot, Supervisor

log = logging.getLogger("pbd.instances")


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


class VersionRuntime:
    # Models this version runs its requests on (an ensemble's steps): unloaded with them.
    depends_on: frozenset[str] = frozenset()

    def __init__(
        self, *, config: ModelConfig, version: int, model_dir: Path, services: InstanceServices
    ) -> None:
        self.config = config
        self.version = version
        self.model_dir = model_dir
        self.services = services
        self.settings = settings = services.settings
        self.state = VersionState.LOADING
        self._reason = ""
        self._load_began = 0.0  # time.monotonic() when load() began
        self.detached = False  # unloaded by letting its instances run on (see unload)
        self.queue: Scheduler[Instance] = make_scheduler(
            config, f"model '{config.name}' version {version}", settings.max_queue_size
        )
        self.stats = ModelStats()
        self.execute_timeout = settings.execute_timeout_secs
        self.memory_limit = settings.instance_memory_limit_bytes
        self.supervisor = Supervisor(self.id, settings, self._new_instance, self._given_up)
        self.dispatch = Dispatch(self.id, self.queue, self.supervisor, self.stats, settings)
        self.policy = ScalingPolicy()
        self.scaler: Scaler | None = None
        self.worker_env: WorkerEnv | None = None  # the model's EXECUTION_ENV_PATH, prepared

    @property
    def id(self) -> str:
        return f"{self.config.name}/{self.version}"

    @property
    def directories(self) -> list[Path]:
        """Where the version's files lie: its version directory, then the model's."""
        return [self.model_dir / str(self.version), self.model_dir]

    @property
    def slots(self) -> list[Slot]:
        return self.supervisor.slots

    def _new_instance(self, plan: InstancePlan) -> Instance:
        return Instance(
            config=self.config,
            version=self.version,
            model_dir=self.model_dir,
            plan=plan,
            services=self.services,
            stats=self.stats,
            execute_timeout=self.execute_timeout,
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
        purpose and will start one for the next request. An instance still running its
        model_warmup samples (one restarted after a crash) takes no request yet: not it."""
        if not self.serving:
            return False
        if any(s.instance.state is State.READY and not s.instance.warming for s in self.slots):
            return True
        # Scaled to zero: no slot, or only retired ones whose workers are on their way out
        # (a slot leaves the list only after its worker has exited).
        return self.scaler is not None and all(s.retired for s in self.slots)

    def instances(self) -> list[Instance]:
        return self.supervisor.instances()

    @property
    def reason(self) -> str:
        """Why the version is not READY; while it loads, the step and for how long so far
        (``loading: initialize() of 1 instance(s), 42 s``: RepositoryIndex, `pbd status`,
        systemd's STATUS=)."""
        if self.state is VersionState.LOADING and self._reason.startswith("loading: "):
            return f"{self._reason}, {time.monotonic() - self._load_began:.0f} s"
        return self._reason

    @reason.setter
    def reason(self, text: str) -> None:
        self._reason = text

    def _loading(self, step: str) -> None:
        """What loading does now (shown in the index and in systemd's STATUS)."""
        self.reason = f"loading: {step}"

    async def load(self) -> None:
        """Start every instance; on any failure stop the rest and raise the first error."""
        source = str(self.model_dir / "config.pbtxt")
        self._load_began = time.monotonic()
        try:
            plans = plan_instances(self.config, self.services.gpus)
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
            self.execute_timeout = limits.execute_timeout
            self.memory_limit = limits.memory_limit
            self.reason = f"loading: initialize() of {len(plans)} instance(s)"
            await self.supervisor.spawn_all(plans)
        except PbdError as exc:
            self.state, self.reason = VersionState.UNAVAILABLE, exc.message
            raise
        self.dispatch.start()
        self.state, self.reason = VersionState.READY, ""
        if self.policy.enabled:
            name = f"model '{self.config.name}' version {self.version}"
            self.scaler = Scaler(name, self.policy, self.supervisor, self.queue)
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
        live_ones = [i for i in self.instances() if i.live]
        if not live_ones:
            return True  # scaled to zero on purpose: the next request starts an instance
        answers = await asyncio.gather(*(i.ready_checked() for i in live_ones))
        return all(answers)

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
            len(self.queue)
            or any(s.instance.batches.inflight or s.instance.requests for s in self.slots)
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
        # Restarting under systemd: the instances were let go, still running, for the next
        # daemon to re-attach (Instance.stop), not finalized.
        self.detached = self.services.launcher.detaching
