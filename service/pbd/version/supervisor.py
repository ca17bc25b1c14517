"""Keeps a model version's instances alive, and as many as asked: the gunicorn arbiter's verbs
for one version.

- *spawn*: start instances for their plans (all at load; one more when scaling up);
- *reap*: each slot has a task that waits for its worker to die, then *restarts* it with
  exponential backoff (reset once an instance stayed up ``STABLE_UPTIME_S``);
- *murder*: a worker silent past ``--worker-heartbeat-timeout-secs`` is killed, which fails
  only what it was executing (then it is reaped as any dead one);
- *give up*: an instance whose restart fails ``MAX_RESTART_FAILURES`` times in a row, or whose
  ``initialize()`` raises, is not restarted again; a version with no instance left is
  UNAVAILABLE with that reason;
- *manage instances*: start or retire instances until as many run as the scaler asks for;
  *retire* drains an instance (it takes no new work, finishes what it has) and stops it.

The supervisor owns the version's slots; the version's dispatch picks among their instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from pbd.errors import Code, PbdError
from pbd.instance.instance import Instance
from pbd.instance.records import InstancePlan
from pbd.settings import Settings

log = logging.getLogger("pbd.instances")
MAX_RESTART_FAILURES = 5
STABLE_UPTIME_S = 30.0
FIRST_BACKOFF_S = 0.1  # doubled at each restart, up to --restart-backoff-max-secs


@dataclass
class Slot:
    plan: InstancePlan
    instance: Instance
    task: asyncio.Task[None] | None = None
    given_up: str = ""
    restarts: int = 0
    started_at: float = field(default=0.0)
    retired: bool = False  # being scaled away: do not restart it


class Supervisor:
    def __init__(
        self,
        name: str,
        settings: Settings,
        new_instance: Callable[[InstancePlan], Instance],
        on_all_given_up: Callable[[str], None],
    ) -> None:
        self.name = name  # "<model>/<version>", for task names
        self.settings = settings
        self.new_instance = new_instance
        self.on_all_given_up = on_all_given_up
        # Never rebound: the dispatch reads this list as the version's instances.
        self.slots: list[Slot] = []
        self.templates: list[InstancePlan] = []  # the plans at load: scaled instances copy them
        self.stopping = False
        self._murderer: asyncio.Task[None] | None = None
        self._changes: set[asyncio.Task[Any]] = set()  # instances being started or retired
        self._starting: list[Instance] = []  # spawn_all's, until they all started

    # -- what the version and its dispatch read -----------------------------------------------

    def instances(self) -> list[Instance]:
        return [s.instance for s in self.slots]

    def with_starting(self) -> list[Instance]:
        """The instances, and those of a load still starting (their workers run already:
        under systemd their units are this version's, no orphans)."""
        return [*self._starting, *self.instances()]

    def instance_names(self) -> list[str]:
        """Instances that run or will run again."""
        return [s.plan.name for s in self.slots if not s.given_up and not s.retired]

    def live_slots(self) -> list[Slot]:
        """Slots counted as the version's instances: neither retired nor given up."""
        return [s for s in self.slots if not s.retired and not s.given_up]

    def inflight(self) -> int:
        """Batches the daemon has in the instances' workers."""
        return sum(s.instance.batches.inflight for s in self.slots)

    def direct_inflight(self) -> int:
        """Requests front ends sent straight to the instances' workers, not answered yet."""
        return sum(s.instance.direct_inflight() for s in self.slots)

    # -- spawn --------------------------------------------------------------------------------

    async def spawn_all(self, plans: list[InstancePlan]) -> None:
        """Start an instance for each plan, then watch them; on any failure stop the others
        and raise the first error."""
        instances = self._starting = [self.new_instance(p) for p in plans]
        try:
            outcomes = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
        except asyncio.CancelledError:  # shutdown during loading: those that started go too
            await asyncio.gather(*(i.stop(1.0) for i in instances), return_exceptions=True)
            raise
        finally:
            self._starting = []
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await asyncio.gather(*(i.stop(1.0) for i in instances), return_exceptions=True)
            first = failures[0]
            raise first if isinstance(first, PbdError) else PbdError(Code.INTERNAL, repr(first))
        self.templates = plans
        for plan, instance in zip(plans, instances, strict=True):
            slot = Slot(plan, instance)
            self.slots.append(slot)
            self.watch(slot)
        self._murderer = asyncio.create_task(self.murder(), name=f"heartbeats {self.name}")

    async def spawn(self) -> Instance | None:
        """Start one more instance; it takes work only once initialize() has returned."""
        plan = self._next_plan()
        slot = Slot(plan, self.new_instance(plan))
        self.slots.append(slot)
        try:
            await slot.instance.start()
        except PbdError as exc:
            log.error("could not add %s: %s", slot.instance.describe(), exc.message)
            self.slots.remove(slot)
            return None
        self.watch(slot)
        return slot.instance

    def _next_plan(self) -> InstancePlan:
        """A new instance copies the templates round robin (so GPU groups spread over their
        GPUs) under a name no live instance has."""
        template = self.templates[len(self.slots) % len(self.templates)]
        group = template.name.rsplit("_", 1)[0]
        taken = {s.plan.name for s in self.slots}
        n = next(i for i in itertools.count() if f"{group}_{i}" not in taken)
        return InstancePlan(f"{group}_{n}", template.kind, template.device_id)

    # -- reap, restart, give up ----------------------------------------------------------------

    def watch(self, slot: Slot) -> None:
        """Reap ``slot``'s worker whenever it dies, until the supervisor stops."""
        slot.started_at = asyncio.get_running_loop().time()
        slot.task = asyncio.create_task(self.reap(slot), name=f"slot {slot.instance.id}")

    async def reap(self, slot: Slot) -> None:
        """Wait for the slot's instance to die, and restart it; again and again."""
        loop = asyncio.get_running_loop()
        backoff = FIRST_BACKOFF_S
        while not self.stopping:
            await slot.instance.died.wait()
            if self.stopping or slot.retired:
                return
            if loop.time() - slot.started_at > STABLE_UPTIME_S:
                backoff = FIRST_BACKOFF_S
            backoff = await self.restart(slot, backoff)
            if slot.given_up:
                return

    async def restart(self, slot: Slot, backoff: float) -> float:
        """Replace the slot's dead instance, waiting ``backoff`` (doubled each time, up to
        ``--restart-backoff-max-secs``) before each try; gives up as the module says. The
        backoff for the next restart."""
        loop = asyncio.get_running_loop()
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
                    self.give_up(slot, exc.message)
                    return backoff
                log.warning(
                    "restart of %s failed (%s); retrying", replacement.describe(), exc.message
                )
                continue
            slot.restarts += 1
            slot.started_at = loop.time()
            log.info("restarted %s (restart %d)", replacement.describe(), slot.restarts)
            break
        return backoff

    def give_up(self, slot: Slot, reason: str) -> None:
        slot.given_up = reason
        log.error("giving up on %s: %s", slot.instance.describe(), reason)
        if all(s.given_up for s in self.slots):
            self.on_all_given_up(reason)

    # -- murder --------------------------------------------------------------------------------

    async def murder(self) -> None:
        """Kill, once a second, the workers that sent no heartbeat in time."""
        loop = asyncio.get_running_loop()
        while not self.stopping:
            await asyncio.sleep(1.0)
            for slot in self.slots:
                if slot.instance.heartbeat_overdue(loop.time()):
                    await slot.instance.kill(
                        f"worker for {slot.instance.describe()} sent no heartbeat for "
                        f"{self.settings.worker_heartbeat_timeout_secs:g}s and was killed"
                    )

    # -- manage instances ----------------------------------------------------------------------

    def manage_instances(self, desired: int, drain_timeout: float) -> None:
        """Start or retire instances until ``desired`` live ones run; the least busy (newest
        first among equals) are retired first, each given ``drain_timeout`` to finish."""
        live = self.live_slots()
        if desired > len(live):
            for _ in range(desired - len(live)):
                self._change(self.spawn())
        else:
            order = sorted(live, key=lambda s: (s.instance.batches.inflight, -s.started_at))
            for slot in order[: len(live) - desired]:
                self._change(self.retire(slot, drain_timeout))

    def _change(self, change: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(change)
        self._changes.add(task)
        task.add_done_callback(self._changes.discard)

    async def retire(self, slot: Slot, drain_timeout: float) -> None:
        """Take no new work on ``slot``, let it finish what it has, then stop it."""
        slot.retired = True
        slot.instance.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        while slot.instance.batches.inflight and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if slot.task is not None:
            slot.task.cancel()
        await slot.instance.stop(max(deadline - loop.time(), 1.0))
        if slot in self.slots:
            self.slots.remove(slot)

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop starting, retiring, reaping and murdering (the instances stay: the version
        stops them)."""
        self.stopping = True
        changes = list(self._changes)
        for change in changes:
            change.cancel()
        for change in changes:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await change
        for task in [*(s.task for s in self.slots), self._murderer]:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
