"""Keeps a model version's instances alive: restarts with backoff, heartbeats, giving up.

The gunicorn arbiter's verbs for one version: *reap* (each instance slot has a task that
waits for its worker to die), *restart* (with exponential backoff, reset once an instance
stayed up ``STABLE_UPTIME_S``), *murder* (a worker silent past
``--worker-heartbeat-timeout-secs`` is killed, which fails only what it was executing) and
*give up* (an instance whose restart fails ``MAX_RESTART_FAILURES`` times in a row, or whose
``initialize()`` raises, is not restarted again; a version with no instance left is
UNAVAILABLE with that reason).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pbd.errors import Code, PbdError
from pbd.instances.instance import Instance
from pbd.instances.records import InstancePlan
from pbd.settings import Settings

log = logging.getLogger("pbd.instances")
MAX_RESTART_FAILURES = 5
STABLE_UPTIME_S = 30.0


@dataclass
class Slot:
    plan: InstancePlan
    instance: Instance
    task: asyncio.Task[None] | None = None
    given_up: str = ""
    restarts: int = 0
    started_at: float = field(default=0.0)
    retired: bool = False  # the scaler is stopping it: do not restart it


class Supervisor:
    def __init__(
        self,
        slots: list[Slot],
        settings: Settings,
        new_instance: Callable[[InstancePlan], Instance],
        on_capacity: Callable[[], None],
        on_all_given_up: Callable[[str], None],
    ) -> None:
        self.slots = slots
        self.settings = settings
        self.new_instance = new_instance
        self.on_capacity = on_capacity  # a restarted instance takes work
        self.on_all_given_up = on_all_given_up
        self.stopping = False
        self._monitor: asyncio.Task[None] | None = None

    def watch(self, slot: Slot) -> None:
        """Restart ``slot``'s worker whenever it dies, until the supervisor stops."""
        slot.started_at = asyncio.get_running_loop().time()
        slot.task = asyncio.create_task(self._run_slot(slot), name=f"slot {slot.instance.id}")

    def start(self) -> None:
        self._monitor = asyncio.create_task(self._watch_heartbeats(), name="heartbeats")

    async def stop(self) -> None:
        self.stopping = True
        for task in [s.task for s in self.slots] + [self._monitor]:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def _run_slot(self, slot: Slot) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while not self.stopping:
            await slot.instance.died.wait()
            if self.stopping or slot.retired:
                return
            if loop.time() - slot.started_at > STABLE_UPTIME_S:
                backoff = 0.1
            failures = 0
            while not self.stopping:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.restart_backoff_max_secs)
                replacement = self.new_instance(slot.plan)
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
                self.on_capacity()
                log.info("restarted %s (restart %d)", replacement.describe(), slot.restarts)
                break

    def _give_up(self, slot: Slot, reason: str) -> None:
        slot.given_up = reason
        log.error("giving up on %s: %s", slot.instance.describe(), reason)
        if all(s.given_up for s in self.slots):
            self.on_all_given_up(reason)

    async def _watch_heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping:
            await asyncio.sleep(1.0)
            for slot in self.slots:
                if slot.instance.heartbeat_overdue(loop.time()):
                    await slot.instance.kill(
                        f"worker for {slot.instance.describe()} sent no heartbeat for "
                        f"{self.settings.worker_heartbeat_timeout_secs:g}s and was killed"
                    )
