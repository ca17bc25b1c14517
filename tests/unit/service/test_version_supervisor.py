"""pbd.version.supervisor: a version's instances kept alive and as many as asked, with real
instances over scripted workers (worker_samples): spawn, reap and restart, give up, murder,
manage_instances and retire."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from instance_samples import model_config
from worker_samples import FakeLauncher, instance_services, started_hub, stop_supervised, until

from pbd.errors import Code, PbdError
from pbd.instance.instance import Instance
from pbd.instance.records import InstancePlan, State
from pbd.version.supervisor import Supervisor

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes


class Version:
    """What a version gives its supervisor: how to make an instance, and what to do when
    every instance was given up."""

    def __init__(self, tmp_path: Path, launcher: FakeLauncher, **settings: object) -> None:
        self.tmp_path, self.launcher, self.settings = tmp_path, launcher, settings
        self.given_up: list[str] = []
        self.capacity = 0

    def new_instance(self, plan: InstancePlan) -> Instance:
        return Instance(
            config=model_config(),
            version=1,
            model_dir=self.tmp_path / "m",
            plan=plan,
            services=self.services,
            on_capacity=self.on_capacity,
        )

    def on_capacity(self) -> None:
        self.capacity += 1


def run(
    tmp_path: Path,
    test: Callable[[Supervisor, Version], Awaitable[None]],
    launcher: FakeLauncher | None = None,
    plans: int = 1,
    **settings: object,
) -> None:
    async def main() -> None:
        hub = await started_hub()
        version = Version(tmp_path, launcher or FakeLauncher())
        version.services = instance_services(tmp_path, version.launcher, hub, **settings)
        supervisor = Supervisor(
            "m/1", version.services.settings, version.new_instance, version.given_up.append
        )
        try:
            await supervisor.spawn_all([InstancePlan(f"m_{n}", "CPU", 0) for n in range(plans)])
            await asyncio.wait_for(test(supervisor, version), WAIT_S)
        finally:
            await stop_supervised(supervisor, hub)

    asyncio.run(main())


def test_a_dead_instance_is_reaped_and_restarted(tmp_path: Path) -> None:
    async def test(supervisor: Supervisor, version: Version) -> None:
        (slot,) = supervisor.slots
        first = slot.instance
        assert supervisor.instance_names() == ["m_0"] and version.capacity == 1
        version.launcher.workers[0].die()
        await until(lambda: slot.restarts == 1)
        assert first.state is State.DEAD and slot.instance is not first
        assert slot.instance.state is State.READY and slot.instance.plan.name == "m_0"
        assert version.capacity == 2  # the replacement told the dispatch it can take work
        assert len(version.launcher.workers) == 2

    run(tmp_path, test)


def test_an_instance_whose_initialize_raises_on_restart_is_given_up(tmp_path: Path) -> None:
    async def test(supervisor: Supervisor, version: Version) -> None:
        (slot,) = supervisor.slots
        version.launcher.init_error = "boom"
        version.launcher.workers[0].die()
        await until(lambda: bool(slot.given_up))
        assert slot.given_up == "boom" and version.given_up == ["boom"]
        assert supervisor.instance_names() == []

    run(tmp_path, test)


def test_spawning_stops_them_all_when_one_fails(tmp_path: Path) -> None:
    async def main() -> None:
        hub = await started_hub()
        version = Version(tmp_path, FakeLauncher(init_error="boom"))
        version.services = instance_services(tmp_path, version.launcher, hub)
        supervisor = Supervisor("m/1", version.services.settings, version.new_instance, print)
        with pytest.raises(PbdError) as caught:
            await supervisor.spawn_all(
                [InstancePlan("m_0", "CPU", 0), InstancePlan("m_1", "CPU", 0)]
            )
        assert (caught.value.code, caught.value.message) == (Code.INTERNAL, "boom")
        assert supervisor.slots == [] and set(version.launcher.stopped) == {"m/1/m_0", "m/1/m_1"}
        await hub.close()

    asyncio.run(main())


def test_a_silent_worker_is_murdered_then_restarted(tmp_path: Path) -> None:
    async def test(supervisor: Supervisor, version: Version) -> None:
        (slot,) = supervisor.slots
        first = slot.instance
        await until(lambda: slot.restarts == 1)  # no heartbeat came within 0.1 s
        assert first.state is State.DEAD
        assert first.reason == (
            "worker for instance 'm_0' of model 'm' version 1 sent no heartbeat for 0.1s "
            "and was killed"
        )

    run(tmp_path, test, worker_heartbeat_timeout_secs=0.1)


def test_manage_instances_starts_more_and_retires_the_least_busy_newest(tmp_path: Path) -> None:
    async def test(supervisor: Supervisor, version: Version) -> None:
        supervisor.manage_instances(3, drain_timeout=1.0)
        await until(lambda: sum(s.instance.live for s in supervisor.slots) == 3)
        assert supervisor.instance_names() == ["m_0", "m_1", "m_2"]
        supervisor.slots[0].instance.batches.inflight = 1  # busy: not the one to retire
        supervisor.manage_instances(1, drain_timeout=0.0)
        await until(lambda: len(supervisor.slots) == 1)
        assert supervisor.instance_names() == ["m_0"]
        supervisor.slots[0].instance.batches.inflight = 0

    run(tmp_path, test)
