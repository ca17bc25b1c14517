"""The loop that applies load-driven scaling to one model version.

Every ``SAMPLE_INTERVAL_S`` it samples the version's load, asks :func:`autoscale.decide` for
the desired count, and starts or retires instances to match. New instances take work only
once ready; retired ones drain first. Requests that wait at zero instances longer than the
cold-start bound fail with UNAVAILABLE and a message saying why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
from collections.abc import Coroutine
from typing import Any, Protocol

from pbd.errors import unavailable
from pbd.instances.autoscale import SAMPLE_INTERVAL_S, Decision, ScalingPolicy, decide
from pbd.instances.records import State
from pbd.instances.supervisor import Slot
from pbd.repository.config import ModelConfig
from pbd.scheduling.scheduler import Scheduler


class ScaledVersion(Protocol):
    """What scaling uses of a model version (``pbd.instances.version.VersionRuntime``,
    which imports this module)."""

    @property
    def id(self) -> str: ...
    @property
    def config(self) -> ModelConfig: ...
    @property
    def version(self) -> int: ...
    @property
    def policy(self) -> ScalingPolicy: ...
    @property
    def slots(self) -> list[Slot]: ...
    @property
    def queue(self) -> Scheduler[Any]: ...
    def load_now(self) -> int: ...
    async def add_instance(self) -> object: ...
    async def retire_instance(self, slot: Slot, drain_timeout: float) -> None: ...


log = logging.getLogger("pbd.autoscale")


class Scaler:
    def __init__(self, runtime: ScaledVersion) -> None:
        self.runtime = runtime
        self.policy = runtime.policy
        self.samples: collections.deque[tuple[float, float]] = collections.deque()
        self.last_scale_up = -math.inf
        self.decision = Decision(len(runtime.slots), "initial count")
        self._task: asyncio.Task[None] | None = None
        self._changes: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"scaler {self.runtime.id}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._changes) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def status(self) -> str:
        """One line for RepositoryIndex and ``pbd status``."""
        slots = self.runtime.slots
        ready = sum(1 for s in slots if s.instance.state is State.READY and not s.retired)
        p = self.policy
        return (
            f"instances {ready} ready of {len(slots)} (desired {self.decision.desired}, "
            f"min {p.min_instances}, max {p.max_instances}): {self.decision.reason}"
        )

    def _live(self) -> list[Slot]:
        return [s for s in self.runtime.slots if not s.retired and not s.given_up]

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        keep = max(self.policy.scale_down_window_s, self.policy.burst_window_s) + 1.0
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            now = loop.time()
            self.samples.append((now, float(self.runtime.load_now())))
            while self.samples and now - self.samples[0][0] > keep:
                self.samples.popleft()
            self._expire_cold_waits(now)
            live = self._live()
            decision = decide(self.policy, self.samples, now, len(live), self.last_scale_up)
            if decision.desired != len(live):
                self.decision = decision
                log.info(
                    "model '%s' version %d: %d -> %d instances (%s)",
                    self.runtime.config.name,
                    self.runtime.version,
                    len(live),
                    decision.desired,
                    decision.reason,
                )
                if decision.desired > len(live):
                    self.last_scale_up = now
                    for _ in range(decision.desired - len(live)):
                        self._spawn(self.runtime.add_instance())
                else:
                    # Retire the least busy first; newest first among equals.
                    order = sorted(live, key=lambda s: (s.instance.inflight, -s.started_at))
                    for slot in order[: len(live) - decision.desired]:
                        self._spawn(
                            self.runtime.retire_instance(slot, self.policy.scale_down_delay_s)
                        )

    def _spawn(self, change: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(change)
        self._changes.add(task)
        task.add_done_callback(self._changes.discard)

    def _expire_cold_waits(self, now: float) -> None:
        if any(s.instance.state is State.READY for s in self.runtime.slots):
            return
        cutoff = now - self.policy.cold_start_timeout_s
        error = unavailable(
            f"model '{self.runtime.config.name}' version {self.runtime.version} has no running "
            f"instance (scaled to zero) and none became ready within "
            f"{self.policy.cold_start_timeout_s:g}s (pbd.cold_start_timeout_s)"
        )
        self.runtime.queue.fail_older_than(cutoff, error)
