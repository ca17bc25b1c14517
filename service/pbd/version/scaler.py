"""The loop that applies load-driven scaling to one model version.

Every ``SAMPLE_INTERVAL_S`` it samples the version's load, asks :func:`autoscale.decide` for
the desired count, and has the version's supervisor start or retire instances to match
(``Supervisor.manage_instances``). New instances take work only once ready; retired ones drain
first. Requests that wait at zero instances longer than the
cold-start bound fail with UNAVAILABLE and a message saying why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
from typing import Any

from pbd.errors import unavailable
from pbd.instance.records import State
from pbd.scheduling.scheduler import Scheduler
from pbd.version.autoscale import SAMPLE_INTERVAL_S, Decision, ScalingPolicy, decide
from pbd.version.supervisor import Supervisor

log = logging.getLogger("pbd.autoscale")


class Scaler:
    def __init__(
        self, name: str, policy: ScalingPolicy, supervisor: Supervisor, queue: Scheduler[Any]
    ) -> None:
        self.name = name  # "model 'm' version 1"
        self.policy = policy
        self.supervisor = supervisor  # starts and retires the instances
        self.queue = queue  # the version's requests waiting for an instance
        self.samples: collections.deque[tuple[float, float]] = collections.deque()
        self.last_scale_up = -math.inf
        self.decision = Decision(len(supervisor.slots), "initial count")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"scaler of {self.name}")

    async def stop(self) -> None:
        """Stop deciding (instances being started or retired are the supervisor's)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def load_now(self) -> int:
        """Requests queued or in flight, those front ends sent straight to the workers
        included: the signal scaling samples."""
        supervisor = self.supervisor
        return len(self.queue) + supervisor.inflight() + supervisor.direct_inflight()

    def status(self) -> str:
        """One line for RepositoryIndex and ``pbd status``."""
        slots = self.supervisor.slots
        ready = sum(1 for s in slots if s.instance.state is State.READY and not s.retired)
        p = self.policy
        return (
            f"instances {ready} ready of {len(slots)} (desired {self.decision.desired}, "
            f"min {p.min_instances}, max {p.max_instances}): {self.decision.reason}"
        )

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        keep = max(self.policy.scale_down_window_s, self.policy.burst_window_s) + 1.0
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            now = loop.time()
            self.samples.append((now, float(self.load_now())))
            while self.samples and now - self.samples[0][0] > keep:
                self.samples.popleft()
            self._expire_cold_waits(now)
            live = len(self.supervisor.live_slots())
            decision = decide(self.policy, self.samples, now, live, self.last_scale_up)
            if decision.desired != live:
                self.decision = decision
                desired, why = decision.desired, decision.reason
                log.info("%s: %d -> %d instances (%s)", self.name, live, desired, why)
                if decision.desired > live:
                    self.last_scale_up = now
                self.supervisor.manage_instances(decision.desired, self.policy.scale_down_delay_s)

    def _expire_cold_waits(self, now: float) -> None:
        if any(s.instance.state is State.READY for s in self.supervisor.slots):
            return
        cutoff = now - self.policy.cold_start_timeout_s
        error = unavailable(
            f"{self.name} has no running instance (scaled to zero) and none became ready "
            f"within {self.policy.cold_start_timeout_s:g}s (pbd.cold_start_timeout_s)"
        )
        self.queue.fail_older_than(cutoff, error)
