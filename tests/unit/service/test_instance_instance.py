"""pbd.instance.instance: one model instance over a real hub and link, its worker a scripted
stand-in (worker_samples): start-up, a batch out and its result back, the early answer, a
worker that dies or hangs, readiness, BLS messages handed on, and stopping."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from instance_samples import model_config
from scheduling_samples import prepared
from worker_samples import FakeLauncher, FakeWorker, quick_settings, started_hub, until

from pbd.errors import Code, PbdError
from pbd.instance.instance import BLS_KINDS, Instance, InstanceServices
from pbd.instance.records import InstancePlan, NotSent, State
from pbd.types import InferResult
from pbd_wire import worker_pb2 as wpb

WAIT_S = 5.0  # a bound on a test that went wrong, never reached when it passes
_bases = itertools.count()


class Sink:
    """Where the instance hands its worker's BLS messages."""

    def __init__(self) -> None:
        self.got: list[tuple[Instance, str]] = []

    def on_message(self, caller: Instance, message: wpb.WorkerToDaemon) -> None:
        self.got.append((caller, str(message.WhichOneof("kind"))))


class Room:
    """What the dispatch hears from an instance: it can take work."""

    def __init__(self) -> None:
        self.told = 0

    def on_capacity(self) -> None:
        self.told += 1


def run(
    tmp_path: Path,
    test: Callable[[Instance, FakeLauncher, Room], Awaitable[None]],
    launcher: FakeLauncher | None = None,
    start: bool = True,
    config: str = "",
    **settings: object,
) -> None:
    async def main() -> None:
        hub = await started_hub()
        fake = launcher if launcher is not None else FakeLauncher()
        services = InstanceServices(
            settings=quick_settings(shm_dir=tmp_path, **settings),
            launcher=fake,
            hub=hub,
            shm_name=lambda: f"pbdtest-inst{next(_bases)}",
            bls=Sink(),
        )
        room = Room()
        instance = Instance(
            config=model_config(config),
            version=1,
            model_dir=tmp_path / "m",
            plan=InstancePlan("m_0", "CPU", 0),
            services=services,
            execute_timeout=float(settings.get("execute_timeout_secs", 0.0)),  # type: ignore[arg-type]
            on_capacity=room.on_capacity,
        )
        try:
            if start:
                await asyncio.wait_for(instance.start(), WAIT_S)
            await asyncio.wait_for(test(instance, fake, room), WAIT_S)
        finally:
            await instance.stop(1.0)
            await hub.close()

    asyncio.run(main())


def kinds(worker: FakeWorker) -> list[str]:
    return [str(frame.WhichOneof("kind")) for frame in worker.frames]


def silent(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
    """A model still in execute(): the worker answers everything but batches."""
    if message.WhichOneof("kind") != "execute":
        worker.answer(message)


def test_start_initializes_the_worker_then_the_instance_takes_work(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        (worker,) = launcher.workers
        assert instance.state is State.READY and instance.live and instance.pid == worker.pid
        assert kinds(worker) == ["settings", "initialize"]  # log settings first
        init = worker.frames[1].initialize
        assert init.args["model_name"] == "m" and init.args["model_instance_name"] == "m_0"
        assert room.told == 1  # ready: the dispatch may give it work
        await instance.stop(1.0)
        assert instance.state is State.STOPPED
        assert kinds(worker)[-1] == "finalize" and launcher.stopped == [instance.id]

    run(tmp_path, test)


def test_an_initialize_that_raises_fails_the_start(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        with pytest.raises(PbdError) as caught:
            await instance.start()
        assert (caught.value.code, caught.value.message) == (Code.INTERNAL, "boom")
        assert instance.state is State.DEAD and room.told == 0
        assert launcher.stopped == [instance.id]

    run(tmp_path, test, FakeLauncher(init_error="boom"), start=False)


def test_a_heartbeat_ahead_of_initialized_is_no_reply(tmp_path: Path) -> None:
    """A worker re-attaching to a new daemon may send a heartbeat (or spans) between its Hello
    and its Initialized; the start waits for Initialized (it failed with "unexpected first
    reply", and the model stayed UNAVAILABLE, issue #31)."""

    def heartbeat_first(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
        if message.WhichOneof("kind") == "initialize":
            worker.send(wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat(executed=7)))
            worker.send(wpb.WorkerToDaemon(spans=wpb.SpanBatch()))
        worker.answer(message)

    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        await asyncio.wait_for(instance.start(), WAIT_S)
        assert instance.state is State.READY and instance.executed == 7

    run(tmp_path, test, FakeLauncher(on_frame=heartbeat_first), start=False)


WARMUP = (
    'model_warmup [ { name: "w" batch_size: 1 '
    'inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]'
)


@pytest.mark.parametrize("warmed_up", [False, True])
def test_an_adopted_worker_is_warmed_up_unless_a_daemon_saw_its_warmup_end(
    tmp_path: Path, warmed_up: bool
) -> None:
    """A daemon that died during model_warmup left a worker that a new daemon adopts: it runs
    the samples before the instance is ready, and tells the worker once they ran."""

    def adopted(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
        if message.WhichOneof("kind") == "initialize":
            reply = wpb.Initialized(adopted=True, warmed_up=warmed_up)
            worker.send(wpb.WorkerToDaemon(initialized=reply))
            return
        worker.answer(message)

    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        (worker,) = launcher.workers
        assert instance.adopted and instance.state is State.READY and not instance.warming
        expected = ["settings", "initialize"]
        if not warmed_up:
            expected += ["execute", "warmed_up"]
        assert kinds(worker) == expected

    run(tmp_path, test, FakeLauncher(on_frame=adopted), config=WARMUP)


def test_a_fresh_worker_is_told_once_its_warmup_ran(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        (worker,) = launcher.workers
        assert kinds(worker) == ["settings", "initialize", "execute", "warmed_up"]

    run(tmp_path, test, config=WARMUP)


def test_a_lone_request_is_answered_where_its_result_is_read(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        answered: list[InferResult] = []
        request = prepared(0)
        request.request.respond = answered.append
        instance.batches.inflight += 1  # the dispatch took its room
        (outcome,) = await instance.execute([request], in_order=False)
        assert isinstance(outcome, InferResult) and answered == [outcome]
        assert outcome.model_version == "1" and outcome.id == "0"
        assert instance.batches.inflight == 0 and room.told == 2  # ready, then room back
        assert instance.batches.stats.execution_count == 1
        (worker,) = launcher.workers
        (execute,) = [f.execute for f in worker.frames if f.WhichOneof("kind") == "execute"]
        assert [r.id for r in execute.requests] == ["0"]

    run(tmp_path, test)


def test_a_worker_that_dies_fails_what_it_had_and_nothing_is_sent_after(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        launcher.on_frame = silent
        instance.batches.inflight += 1
        running = asyncio.ensure_future(instance.execute([prepared(0)]))
        await until(lambda: len(instance.batches))
        launcher.workers[0].die()  # SIGKILL
        with pytest.raises(PbdError) as caught:
            await running
        assert caught.value.code is Code.UNAVAILABLE
        assert caught.value.message == (
            "worker for instance 'm_0' of model 'm' version 1 killed by signal 9 (SIGKILL)"
        )
        assert instance.state is State.DEAD and instance.died.is_set()
        assert instance.batches.inflight == 0
        instance.batches.inflight += 1
        with pytest.raises(NotSent):
            await instance.execute([prepared(1)])
        assert instance.batches.inflight == 0  # its room given back

    run(tmp_path, test)


def test_a_hung_execute_gets_its_worker_killed(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        launcher.on_frame = silent
        instance.batches.inflight += 1
        with pytest.raises(PbdError) as caught:
            await instance.execute([prepared(0)])
        assert caught.value.message == (
            "instance 'm_0' of model 'm' version 1: execute() did not return within 0.05s; "
            "the instance was killed and is being replaced"
        )
        assert instance.state is State.DEAD and launcher.stopped == [instance.id]

    run(tmp_path, test, execute_timeout_secs=0.05)


def test_readiness_is_the_models_answer_while_the_worker_lives(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        assert await instance.ready_checked()
        assert kinds(launcher.workers[0])[-1] == "ready_query"
        launcher.workers[0].die()
        await instance.died.wait()
        assert not await instance.ready_checked()

    run(tmp_path, test)


def test_bls_messages_go_to_the_bls_sink(tmp_path: Path) -> None:
    async def test(instance: Instance, launcher: FakeLauncher, room: Room) -> None:
        worker = launcher.workers[0]
        worker.send(wpb.WorkerToDaemon(bls_done=wpb.BlsDone(call_ids=[1])))
        worker.send(wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat(executed=3)))
        await until(lambda: instance.executed == 3)
        sink = instance.services.bls
        assert isinstance(sink, Sink) and sink.got == [(instance, "bls_done")]

    run(tmp_path, test)


def test_every_bls_kind_is_a_worker_to_daemon_message() -> None:
    fields = {f.name for f in wpb.WorkerToDaemon.DESCRIPTOR.oneofs_by_name["kind"].fields}
    assert {f for f in fields if f.startswith(("bls_", "pool_"))} == BLS_KINDS
