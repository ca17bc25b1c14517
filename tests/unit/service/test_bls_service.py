"""pbd.bls.service: the calls a model makes to another model, over a real dataplane, repository
and instances whose workers are scripted (worker_samples): the callee (``m``) returns its input
as its output, in place; the caller is an instance whose worker sends the calls."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from instance_samples import model_config
from worker_samples import FakeLauncher, FakeWorker, identity, instance_services, started_hub, until

from pbd.bls.service import TIMEOUT_MESSAGE, BlsService
from pbd.dataplane import DataPlane
from pbd.instance.instance import Instance
from pbd.instance.records import InstancePlan
from pbd.memory.client_shm import ClientShmRegistry
from pbd.modelconfig.model import ModelConfig
from pbd.repository.manager import ModelRepository
from pbd.version.runtime import VersionRuntime
from pbd_wire import worker_pb2 as wpb

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes
CONFIG = """
name: "m"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


@dataclass
class Bls:
    service: BlsService
    caller: Instance
    worker: FakeWorker  # the caller's
    callee_launcher: FakeLauncher

    async def reply(self, call_id: int) -> wpb.BlsReply:
        """The final reply to ``call_id``, once the caller's worker has it."""
        while True:
            for frame in self.worker.frames:
                reply = frame.bls_reply
                if (
                    frame.WhichOneof("kind") == "bls_reply"
                    and reply.call_id == call_id
                    and reply.final
                ):
                    return reply
            await asyncio.sleep(0.002)

    def call(self, call_id: int, model: str, data: bytes, timeout_us: int = 0) -> None:
        """A call of the caller's model, its input in a block of the caller's own arena."""
        block = self.caller.memory.arena.allocate(len(data))
        block.view()[:] = data
        request = wpb.Request(timeout_us=timeout_us)
        request.inputs.add(name="X", datatype="FP32", shape=[2], nbytes=len(data),
                           region=block.segment.name, offset=block.offset)  # fmt: skip
        call = wpb.BlsCall(call_id=call_id, model_name=model, model_version=-1, request=request)
        self.worker.send(wpb.WorkerToDaemon(bls_call=call))


def run(
    tmp_path: Path, test: Callable[[Bls], Awaitable[None]], callee_answers: bool = True
) -> None:
    async def main() -> None:
        hub = await started_hub()
        callee_launcher = FakeLauncher(on_frame=identity if callee_answers else _holds_batches)
        callee_services = instance_services(tmp_path, callee_launcher, hub)

        def make_runtime(config: ModelConfig, version: int, model_dir: Path) -> VersionRuntime:
            return VersionRuntime(
                config=config, version=version, model_dir=model_dir, services=callee_services
            )

        root = tmp_path / "repo"
        (root / "m" / "1").mkdir(parents=True)
        (root / "m" / "config.pbtxt").write_text(CONFIG)
        repository = ModelRepository(root, make_runtime, 1.0)
        settings = callee_services.settings
        shm = ClientShmRegistry(enabled=False, key_prefixes=[], shm_dir=str(tmp_path))
        dataplane = DataPlane(repository, settings, shm)
        service = BlsService(dataplane)
        caller_launcher = FakeLauncher()
        caller = Instance(
            config=model_config(),
            version=1,
            model_dir=tmp_path,
            plan=InstancePlan("caller_0", "CPU", 0),
            services=dataclasses.replace(
                instance_services(tmp_path, caller_launcher, hub), bls=service
            ),
        )
        try:
            await repository.load("m")
            await caller.start()
            bls = Bls(service, caller, caller_launcher.workers[0], callee_launcher)
            await asyncio.wait_for(test(bls), WAIT_S)
        finally:
            await service.close()
            await caller.stop(1.0)
            await repository.unload_all()
            await hub.close()

    asyncio.run(main())


def _holds_batches(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
    if message.WhichOneof("kind") != "execute":
        worker.answer(message)


def test_a_call_is_answered_with_the_callees_outputs_where_they_lie(tmp_path: Path) -> None:
    async def test(bls: Bls) -> None:
        data = b"\x00\x00\x80?\x00\x00\x00@"  # [1.0, 2.0]
        bls.call(1, "m", data)
        reply = await bls.reply(1)
        assert not reply.response.HasField("error")
        (out,) = reply.response.outputs
        assert (out.name, out.datatype, list(out.shape), out.nbytes) == ("Y", "FP32", [2], 8)
        # It lies in the callee's arena (its input, returned in place): not the caller's.
        assert bls.caller.memory.arena.find(out.region) is None
        callee = bls.service.dp.repository.lookup("m", "").instances()[0]
        segment = callee.memory.arena.find(out.region)
        assert segment is not None and bytes(segment.view(out.offset, out.nbytes)) == data
        assert callee.memory.arena.used > 0  # held for the caller
        bls.worker.send(wpb.WorkerToDaemon(bls_done=wpb.BlsDone(call_ids=[1])))
        await until(lambda: not callee.memory.arena.used)  # the caller dropped its outputs

    run(tmp_path, test)


def test_a_call_to_a_model_that_is_not_ready_gets_tritons_error(tmp_path: Path) -> None:
    async def test(bls: Bls) -> None:
        bls.call(2, "nope", bytes(8))
        error = (await bls.reply(2)).response.error
        assert (error.code, error.message) == (
            "INTERNAL",
            "Model nope - Error when running inference: Failed for execute the inference "
            "request. Model 'nope' is not ready.",
        )

    run(tmp_path, test)


def test_a_call_past_its_timeout_is_answered_and_its_request_cancelled(tmp_path: Path) -> None:
    async def test(bls: Bls) -> None:
        bls.call(3, "m", bytes(8), timeout_us=50_000)
        error = (await bls.reply(3)).response.error
        assert (error.code, error.message) == ("UNAVAILABLE", TIMEOUT_MESSAGE)
        callee = bls.callee_launcher.workers[0]
        await until(lambda: any(f.WhichOneof("kind") == "cancel" for f in callee.frames))

    run(tmp_path, test, callee_answers=False)


def test_is_model_ready_asks_the_daemon(tmp_path: Path) -> None:
    async def test(bls: Bls) -> None:
        for call_id, model in ((4, "m"), (5, "nope")):
            control = wpb.BlsControl(call_id=call_id, op="ready", model_name=model)
            bls.worker.send(wpb.WorkerToDaemon(bls_control=control))
        assert (await bls.reply(4)).ready and not (await bls.reply(5)).ready

    run(tmp_path, test)
