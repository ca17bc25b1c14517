"""A launcher whose "processes" are coroutines in the test's loop: each connects to the real
``WorkerHub`` with the token it was given and speaks the worker protocol frame by frame, as the
test scripts it. Instances, versions and their supervisors run unchanged over it; only the
process (and the model in it) is a stand-in.

A ``FakeWorker`` says hello, answers Initialize (``init_error`` makes initialize() raise) and
then hands every frame to ``on_frame``, which by default answers an Execute with one empty
response per request, a ReadyQuery with ready, and a Finalize by closing its connection.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pbd.instance.instance import InstanceServices
from pbd.settings import Settings
from pbd.version.supervisor import Supervisor
from pbd.worker.hub import WorkerHub
from pbd.worker.launcher import ExitStatus, WorkerHandle, WorkerSpec
from pbd_wire import TOKEN_ENV
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import HEADER, decode_length, encode_frame, socket_address

_pids = itertools.count(50_000)


def hub_address() -> str:
    return f"@pbd-test-{uuid.uuid4().hex[:12]}"


def quick_settings(**fields: object) -> Settings:
    """Settings under which a fake worker's life takes milliseconds."""
    values: dict[str, object] = {
        "worker_start_timeout_secs": 5.0,
        "model_init_timeout_secs": 5.0,
        "model_finalize_timeout_secs": 2.0,
        "restart_backoff_max_secs": 0.2,
        **fields,
    }
    return Settings(**values)  # type: ignore[arg-type]


class FakeWorker:
    def __init__(self, spec: WorkerSpec, launcher: FakeLauncher) -> None:
        self.spec = spec
        self.pid = next(_pids)
        self.launcher = launcher
        self.frames: list[wpb.DaemonToWorker] = []  # every frame the daemon sent, in order
        self.exit = asyncio.get_running_loop().create_future()  # its ExitStatus, once ended
        self.writer: asyncio.StreamWriter | None = None
        self.task = asyncio.ensure_future(self._run())

    @property
    def instance_id(self) -> str:
        return self.spec.instance_id

    def send(self, message: wpb.WorkerToDaemon) -> None:
        assert self.writer is not None
        self.writer.write(encode_frame(message.SerializeToString()))

    def die(self, returncode: int = -9) -> None:
        """The process ends (killed by SIGKILL, by default): its socket closes."""
        if self.writer is not None:
            self.writer.close()
        if not self.exit.done():
            self.exit.set_result(ExitStatus(returncode))

    async def _run(self) -> None:
        reader, self.writer = await asyncio.open_unix_connection(socket_address(self.spec.socket))
        hello = wpb.Hello(
            instance=self.spec.instance_id, token=self.spec.env[TOKEN_ENV], pid=self.pid
        )
        self.send(wpb.WorkerToDaemon(hello=hello))
        try:
            while True:
                header = await reader.readexactly(HEADER.size)
                frame = await reader.readexactly(decode_length(header))
                message = wpb.DaemonToWorker.FromString(frame)
                self.frames.append(message)
                self.launcher.on_frame(self, message)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.die(0)

    def answer(self, message: wpb.DaemonToWorker) -> None:
        """What a model that returns one empty response per request does."""
        kind = message.WhichOneof("kind")
        if kind == "initialize":
            error = self.launcher.init_error
            reply = wpb.Initialized()
            if error:
                reply.error.code, reply.error.message = "INTERNAL", error
            self.send(wpb.WorkerToDaemon(initialized=reply))
        elif kind == "execute":
            result = wpb.ExecuteResult(batch_id=message.execute.batch_id)
            for request in message.execute.requests:
                result.responses.add(request_id=request.request_id)
            self.send(wpb.WorkerToDaemon(result=result))
        elif kind == "ready_query":
            reply = wpb.ReadyReply(query=message.ready_query.query, hooked=True, ready=True)
            self.send(wpb.WorkerToDaemon(ready_reply=reply))
        elif kind == "finalize":
            self.send(wpb.WorkerToDaemon(finalized=wpb.Finalized()))
            self.die(0)


def identity(worker: FakeWorker, message: wpb.DaemonToWorker) -> None:
    """A model that returns each input as output ``Y``, in place (the daemon's own block)."""
    if message.WhichOneof("kind") != "execute":
        worker.answer(message)
        return
    result = wpb.ExecuteResult(batch_id=message.execute.batch_id)
    for request in message.execute.requests:
        response = result.responses.add(request_id=request.request_id)
        for ref in request.inputs:
            out = response.outputs.add()
            out.CopyFrom(ref)
            out.name = "Y"
    worker.send(wpb.WorkerToDaemon(result=result))


@dataclass
class FakeHandle:
    worker: FakeWorker

    @property
    def pid(self) -> int | None:
        return self.worker.pid


@dataclass
class FakeLauncher:
    """An ``InstanceLauncher`` whose workers are :class:`FakeWorker` coroutines."""

    init_error: str = ""  # initialize() raises this (Triton's INTERNAL), when set
    detaching: bool = False
    workers: list[FakeWorker] = field(default_factory=list)  # every one started, in order
    # Every frame a worker gets goes here; the default answers as FakeWorker.answer says.
    on_frame: Callable[[FakeWorker, wpb.DaemonToWorker], None] = FakeWorker.answer
    stopped: list[str] = field(default_factory=list)  # instance ids stopped or aborted

    def token(self, instance_id: str) -> str:
        return f"token-{instance_id}"

    async def start(self, spec: WorkerSpec) -> FakeHandle:
        worker = FakeWorker(spec, self)
        self.workers.append(worker)
        return FakeHandle(worker)

    def vouched_pid(self, handle: WorkerHandle) -> int:
        return 0

    def attached(self, handle: WorkerHandle, pid: int, token: str) -> None:
        assert isinstance(handle, FakeHandle) and pid == handle.worker.pid
        assert token == self.token(handle.worker.spec.instance_id)

    async def wait(self, handle: WorkerHandle, timeout: float) -> ExitStatus | None:
        assert isinstance(handle, FakeHandle)
        try:
            return await asyncio.wait_for(asyncio.shield(handle.worker.exit), timeout)
        except TimeoutError:
            return None

    async def stop(self, handle: WorkerHandle, grace: float) -> ExitStatus | None:
        assert isinstance(handle, FakeHandle)
        self.stopped.append(handle.worker.instance_id)
        handle.worker.die(-15)
        return await self.wait(handle, 1.0)

    async def abort(self, handle: WorkerHandle) -> None:
        await self.stop(handle, 0.0)

    def by_instance(self, instance_id: str) -> list[FakeWorker]:
        return [w for w in self.workers if w.instance_id == instance_id]


async def started_hub() -> WorkerHub:
    hub = WorkerHub(hub_address())
    await hub.start()
    return hub


_bases = itertools.count()


def instance_services(
    shm_dir: Path, launcher: FakeLauncher, hub: WorkerHub, **settings: object
) -> InstanceServices:
    """What the daemon lends instances, with the fake launcher and quick settings."""
    return InstanceServices(
        settings=quick_settings(shm_dir=shm_dir, **settings),
        launcher=launcher,
        hub=hub,
        shm_name=lambda: f"pbdtest-{shm_dir.name[-12:]}-{next(_bases)}",
    )


async def until(condition: Callable[[], object]) -> None:
    """Wait for ``condition`` (the test's own timeout bounds it)."""
    while not condition():
        await asyncio.sleep(0.002)


async def stop_supervised(supervisor: Supervisor, hub: WorkerHub) -> None:
    """What a version's unload does to its supervisor and instances, then the hub closed."""
    await supervisor.stop()
    await asyncio.gather(*(i.stop(1.0) for i in supervisor.instances()))
    await hub.close()
