"""pbd.version.scaler: the loop that samples a version's load and has its supervisor start or
retire instances, over real instances and scripted workers (worker_samples), and the version's
real queue. (What count a load asks for is test_version_autoscale's.)"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

from instance_samples import model_config
from scheduling_samples import prepared
from worker_samples import FakeLauncher, instance_services, started_hub, stop_supervised, until

from pbd.errors import Code, PbdError
from pbd.instance.instance import Instance
from pbd.instance.records import InstancePlan
from pbd.scheduling import make_scheduler
from pbd.scheduling.scheduler import Scheduler
from pbd.version.autoscale import ScalingPolicy
from pbd.version.scaler import Scaler
from pbd.version.supervisor import Supervisor

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes
NAME = "model 'm' version 1"
POLICY = ScalingPolicy(
    enabled=True,
    min_instances=1,
    max_instances=2,
    burst_window_s=0.1,
    scale_down_window_s=0.2,
    scale_down_delay_s=0.2,
    cold_start_timeout_s=0.1,
)


def run(
    tmp_path: Path,
    test: Callable[[Scaler, Supervisor, Scheduler[Instance]], Awaitable[None]],
    policy: ScalingPolicy = POLICY,
    instances: int = 1,
) -> None:
    async def main() -> None:
        hub = await started_hub()
        services = instance_services(tmp_path, FakeLauncher(), hub)

        def new_instance(plan: InstancePlan) -> Instance:
            return Instance(
                config=model_config(), version=1, model_dir=tmp_path, plan=plan, services=services
            )

        supervisor = Supervisor("m/1", services.settings, new_instance, lambda reason: None)
        plans = [InstancePlan(f"m_{n}", "CPU", 0) for n in range(instances)]
        await supervisor.spawn_all(plans)
        supervisor.templates = [InstancePlan("m_0", "CPU", 0)]  # as loading leaves them
        queue: Scheduler[Instance] = make_scheduler(model_config(), NAME, 0)
        scaler = Scaler(NAME, policy, supervisor, queue)
        scaler.start()
        try:
            await asyncio.wait_for(test(scaler, supervisor, queue), WAIT_S)
        finally:
            await scaler.stop()
            await stop_supervised(supervisor, hub)

    asyncio.run(main())


def test_load_starts_an_instance_and_quiet_retires_it(tmp_path: Path) -> None:
    async def test(scaler: Scaler, supervisor: Supervisor, queue: Scheduler[Instance]) -> None:
        waiting = [queue.submit(prepared(i)) for i in range(4)]  # nothing dispatches them
        assert scaler.load_now() == 4
        await until(lambda: sum(s.instance.live for s in supervisor.live_slots()) == 2)
        assert scaler.decision.desired == 2 and scaler.decision.reason.startswith("load ")
        assert scaler.status().startswith("instances 2 ready of 2 (desired 2, min 1, max 2): ")
        queue.fail_all(PbdError(Code.UNAVAILABLE, "the test is done with them"))
        for future in waiting:
            assert isinstance(future.exception(), PbdError)
        await until(lambda: len(supervisor.slots) == 1)  # back to the floor once it is quiet
        assert scaler.decision.desired == 1

    run(tmp_path, test)


def test_requests_waiting_at_zero_instances_fail_after_the_cold_start_bound(
    tmp_path: Path,
) -> None:
    async def test(scaler: Scaler, supervisor: Supervisor, queue: Scheduler[Instance]) -> None:
        await until(lambda: not supervisor.slots)  # min 0, no load: scaled to zero
        waiting = queue.submit(prepared(0))  # max_starting 0: the cold start never ends
        await until(waiting.done)
        error = waiting.exception()
        assert isinstance(error, PbdError) and error.code is Code.UNAVAILABLE
        assert error.message == (
            f"{NAME} has no running instance (scaled to zero) and none became ready within "
            "0.1s (pbd.cold_start_timeout_s)"
        )

    run(tmp_path, test, dataclasses.replace(POLICY, min_instances=0, max_starting=0))
