"""pbd.version.runtime: one model version, loaded, serving and unloaded, with real instances,
supervisor, dispatch and queue over scripted workers (worker_samples)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from instance_samples import model_config
from scheduling_samples import prepared
from worker_samples import FakeLauncher, FakeWorker, instance_services, started_hub, until

from pbd.errors import Code, PbdError
from pbd.types import InferResult
from pbd.version.runtime import VersionRuntime, VersionState
from pbd_wire import worker_pb2 as wpb

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes


def run(
    tmp_path: Path,
    test: Callable[[VersionRuntime, FakeLauncher], Awaitable[None]],
    launcher: FakeLauncher | None = None,
    config: str = "",
    load: bool = True,
) -> None:
    async def main() -> None:
        hub = await started_hub()
        fake = launcher if launcher is not None else FakeLauncher()
        runtime = VersionRuntime(
            config=model_config(config),
            version=1,
            model_dir=tmp_path / "m",
            services=instance_services(tmp_path, fake, hub, worker_pipeline_depth=1),
        )
        try:
            if load:
                await asyncio.wait_for(runtime.load(), WAIT_S)
            await asyncio.wait_for(test(runtime, fake), WAIT_S)
        finally:
            await runtime.unload(1.0)
            await hub.close()

    asyncio.run(main())


def test_a_loaded_version_serves_and_unloads(tmp_path: Path) -> None:
    async def test(runtime: VersionRuntime, launcher: FakeLauncher) -> None:
        assert runtime.state is VersionState.READY and runtime.ready and runtime.serving
        assert [s.plan.name for s in runtime.slots] == ["m_0_0", "m_0_1"]  # Triton's names
        result = await runtime.infer(prepared(7))
        assert isinstance(result, InferResult) and result.id == "7"
        assert runtime.stats.success.count == 1 and runtime.stats.execution_count == 1
        assert await runtime.ready_checked()
        await runtime.unload(1.0)
        assert (runtime.state, runtime.reason) == (VersionState.UNAVAILABLE, "unloaded")
        assert all(w.frames[-1].WhichOneof("kind") == "finalize" for w in launcher.workers)
        with pytest.raises(PbdError) as caught:
            await runtime.infer(prepared(8))
        assert caught.value.message == (
            "Request for unknown model: 'm' version 1 is not at ready state"
        )

    run(tmp_path, test, config="instance_group [ { count: 2 kind: KIND_CPU } ]")


def test_an_instance_warming_up_does_not_make_the_version_ready(tmp_path: Path) -> None:
    async def test(runtime: VersionRuntime, launcher: FakeLauncher) -> None:
        first, second = (s.instance for s in runtime.slots)
        first.warming = second.warming = True  # both restarted, running model_warmup
        assert runtime.serving and not runtime.ready
        second.warming = False  # one done: it takes requests
        assert runtime.ready
        first.warming = False

    run(tmp_path, test, config="instance_group [ { count: 2 kind: KIND_CPU } ]")


def test_a_version_whose_initialize_raises_is_unavailable_with_the_reason(
    tmp_path: Path,
) -> None:
    async def test(runtime: VersionRuntime, launcher: FakeLauncher) -> None:
        with pytest.raises(PbdError) as caught:
            await runtime.load()
        assert caught.value.code is Code.INTERNAL
        assert (runtime.state, runtime.reason) == (VersionState.UNAVAILABLE, "boom")
        assert runtime.slots == []

    run(tmp_path, test, FakeLauncher(init_error="boom"), load=False)


def test_a_request_waits_for_the_restart_of_a_dead_instance(tmp_path: Path) -> None:
    held: list[wpb.DaemonToWorker] = []

    def first_worker_holds_batches(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
        if message.WhichOneof("kind") == "execute" and worker is launcher.workers[0]:
            held.append(message)
        else:
            worker.answer(message)

    launcher = FakeLauncher(on_frame=first_worker_holds_batches)

    async def test(runtime: VersionRuntime, launcher: FakeLauncher) -> None:
        first = asyncio.ensure_future(runtime.infer(prepared(1)))
        await until(lambda: held)
        second = asyncio.ensure_future(runtime.infer(prepared(2)))  # waits in the queue
        await asyncio.sleep(0.02)
        assert len(runtime.queue) == 1
        launcher.workers[0].die()
        with pytest.raises(PbdError) as caught:
            await first  # what it was executing fails with it
        assert caught.value.code is Code.UNAVAILABLE
        result = await second  # served by the replacement
        assert result.id == "2" and runtime.slots[0].restarts == 1

    run(tmp_path, test, launcher)
