"""One model instance: a worker process and the daemon's connection to it.

Request inputs are copied once, from the gRPC message into this instance's arena; the worker
reads them in place. Outputs are read in place from the worker's segments by the caller of
``execute`` and handed back (``Release``) when the caller is done with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import json
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pbd.errors import Code, PbdError, unavailable
from pbd.instances.hub import WorkerConnection, WorkerHub
from pbd.instances.launcher import InstanceLauncher, WorkerHandle, WorkerSpec
from pbd.instances.memory import InstanceMemory
from pbd.repository.config import ModelConfig
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.types import InferResult
from pbd.validation import PreparedRequest
from pbd_worker._proto import worker_pb2 as wpb
from pbd_worker.ipc import TOKEN_ENV
from pbd_worker.ipc.shm import Block, ShmExhausted

log = logging.getLogger("pbd.instances")
# How a process that hit its memory limit in C code (not as a MemoryError) usually ends.
_MEMORY_SIGNALS = (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGKILL)
# Under load the next Execute carries releases; an idle worker gets them after this long.
RELEASE_DELAY_S = 0.002


class State(enum.Enum):
    STARTING = "STARTING"
    READY = "READY"
    DEAD = "DEAD"
    STOPPED = "STOPPED"


class NotSent(PbdError):
    """The batch never reached the worker (its connection had closed): safe to run elsewhere."""


@dataclass(frozen=True)
class InstancePlan:
    name: str  # Triton's instance name: "<group>_<n>"
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int


class Instance:
    def __init__(
        self,
        *,
        config: ModelConfig,
        version: int,
        model_dir: Path,
        plan: InstancePlan,
        settings: Settings,
        launcher: InstanceLauncher,
        hub: WorkerHub,
        shm_base: str,
        stats: ModelStats | None = None,
        execute_timeout: float = 0.0,
        memory_limit: int = 0,
    ) -> None:
        self.config = config
        self.version = version
        self.model_dir = model_dir
        self.plan = plan
        self.settings = settings
        self.launcher = launcher
        self.hub = hub
        self.id = f"{config.name}/{version}/{plan.name}"
        self.state = State.STARTING
        self.reason = ""
        self.died = asyncio.Event()
        self.handle: WorkerHandle | None = None
        self.conn: WorkerConnection | None = None
        self.memory = InstanceMemory(shm_base, settings)
        self.stats = stats if stats is not None else ModelStats()
        self.execute_timeout = execute_timeout
        self.memory_limit = memory_limit  # bytes of private memory the worker may use; 0: any
        self.exit_why = ""  # what the worker said (Exiting) before it went away
        self.last_seen = 0.0
        self.executed = 0
        self.inflight = 0  # batches sent and not answered (the supervisor counts them)
        self.draining = False  # being scaled away: finishes its work, takes no more
        self._batch_ids = itertools.count(1)
        # batch id -> (future for its result, the input blocks it holds)
        self._pending: dict[int, tuple[asyncio.Future[wpb.ExecuteResult], list[Block]]] = {}
        self._to_release: list[int] = []
        self._release_timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.handle.pid if self.handle is not None else None

    def describe(self) -> str:
        return f"instance '{self.plan.name}' of model '{self.config.name}' version {self.version}"

    # -- start -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the worker and run initialize(); raises PbdError with the model's error."""
        token, connected = self.hub.expect(self.id)
        try:
            self.handle = await self.launcher.start(
                WorkerSpec(
                    self.id, self.hub.address, {TOKEN_ENV: token}, memory_limit=self.memory_limit
                )
            )
            self.conn = await self._wait_connected(connected)
            self.conn.send(wpb.DaemonToWorker(initialize=self._initialize_message()))
            reply = await self._wait_message(self.settings.model_init_timeout_secs, "initialize()")
            if reply.WhichOneof("kind") != "initialized":
                raise PbdError(Code.INTERNAL, f"{self.describe()}: unexpected first reply")
            if reply.initialized.HasField("error"):
                err = reply.initialized.error
                if err.traceback:
                    log.error("%s failed to initialize:\n%s", self.describe(), err.traceback)
                raise PbdError(Code.parse(err.code), err.message)
        except BaseException:
            self.hub.forget(self.id)
            await self._terminate(grace=1.0)
            self.state = State.DEAD
            raise
        self.state = State.READY
        self.last_seen = asyncio.get_running_loop().time()
        self._reader = asyncio.create_task(self._read_loop(), name=f"reader {self.id}")

    async def _wait_connected(
        self, connected: asyncio.Future[WorkerConnection]
    ) -> WorkerConnection:
        assert self.handle is not None
        exited = asyncio.ensure_future(
            self.launcher.wait(self.handle, self.settings.worker_start_timeout_secs)
        )
        done, _ = await asyncio.wait({connected, exited}, return_when=asyncio.FIRST_COMPLETED)
        if connected in done:
            exited.cancel()
            return connected.result()
        connected.cancel()
        status = exited.result()
        how = status.describe() if status else "did not connect in time"
        raise unavailable(f"worker for {self.describe()} {how} before connecting")

    async def _wait_message(self, timeout: float, what: str) -> wpb.WorkerToDaemon:
        assert self.conn is not None
        try:
            message = await asyncio.wait_for(self.conn.recv(), timeout)
        except TimeoutError:
            raise unavailable(f"{self.describe()}: {what} did not finish in {timeout:g}s") from None
        if message is None:
            raise unavailable(
                f"worker for {self.describe()} {await self._exit_text()} during {what}"
            )
        return message

    def _initialize_message(self) -> wpb.Initialize:
        model_file = self.model_dir / str(self.version) / self.config.default_model_filename
        args = {
            "model_config": self.config.to_json(),
            "model_instance_kind": self.plan.kind,
            "model_instance_name": self.plan.name,
            "model_instance_device_id": str(self.plan.device_id),
            "model_repository": str(self.model_dir),
            "model_version": str(self.version),
            "model_name": self.config.name,
        }
        return wpb.Initialize(
            args=args,
            model_path=str(model_file),
            model_dir=str(self.model_dir),
            version=str(self.version),
            output_region_prefix=self.memory.output_prefix,
            output_region_bytes=self.settings.shm_default_byte_size,
            heartbeat_interval_ms=self.settings.worker_heartbeat_ms,
            log_verbose=self.settings.log_verbose,
            shm_dir=str(self.settings.shm_dir),
        )

    # -- running -------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self.conn is not None
        loop = asyncio.get_running_loop()
        while True:
            message = await self.conn.recv()
            if message is None:
                break
            self.last_seen = loop.time()
            kind = message.WhichOneof("kind")
            if kind == "result":
                batch_id = message.result.batch_id
                future, blocks = self._pending.pop(batch_id, (None, []))
                if future is not None and not future.done():
                    future.set_result(message.result)
                elif future is not None:
                    # The caller was cancelled; nobody will read these outputs.
                    self._release(batch_id, blocks)
            elif kind == "heartbeat":
                self.executed = message.heartbeat.executed
            elif kind == "exiting":
                self.exit_why = message.exiting.error.message
        if self.state is State.READY:
            await self._lost(f"worker for {self.describe()} {await self._exit_text()}")

    async def _exit_text(self) -> str:
        if self.handle is None:
            return "is gone"
        status = await self.launcher.wait(self.handle, 2.0)
        text = status.describe() if status is not None else "closed its connection"
        if self.exit_why:
            return f"{text}: {self.exit_why}"
        if status is not None and self.memory_limit and status.returncode in _MEMORY_SIGNALS:
            text += f" (its memory limit is {self.memory_limit} bytes; it may have run out)"
        return text

    async def _lost(self, reason: str) -> None:
        self.state = State.DEAD
        self.reason = reason
        log.error("%s", reason)
        error = unavailable(reason)
        for future, blocks in self._pending.values():
            if not future.done():
                future.set_exception(error)
            self.memory.free(blocks)
        self._pending.clear()
        self.died.set()
        await self._terminate(grace=0.0)

    async def kill(self, reason: str) -> None:
        """Declare the worker dead (hung, or silent) and make sure the process is gone."""
        if self.state is State.READY:
            await self._lost(reason)

    def heartbeat_overdue(self, now: float) -> bool:
        return self.state is State.READY and now - self.last_seen > (
            self.settings.worker_heartbeat_timeout_secs
        )

    async def execute(self, batch: list[PreparedRequest]) -> list[InferResult | PbdError]:
        """Run ``batch`` on the worker; one result or error per request, in order."""
        if self.state is not State.READY or self.conn is None:
            # It died between being picked and this call: nothing was sent.
            raise NotSent(Code.UNAVAILABLE, f"{self.describe()} is not ready")
        batch_id = next(self._batch_ids)
        blocks: list[Block] = []
        copy_began = time.perf_counter_ns()
        message = wpb.Execute(batch_id=batch_id)
        try:
            for request_id, prepared in enumerate(batch):
                message.requests.append(self.memory.request_message(request_id, prepared, blocks))
        except ShmExhausted as exc:
            self.memory.free(blocks)
            raise PbdError(Code.RESOURCE_EXHAUSTED, exc.message) from None
        future: asyncio.Future[wpb.ExecuteResult] = asyncio.get_running_loop().create_future()
        self._pending[batch_id] = (future, blocks)
        message.release.extend(self._to_release)
        self._to_release.clear()
        copy_ns = time.perf_counter_ns() - copy_began
        try:
            self.conn.send(wpb.DaemonToWorker(execute=message))
        except PbdError:
            # The worker died and the reader has not seen it yet: the batch never left.
            self._pending.pop(batch_id, None)
            self.memory.free(blocks)
            self.draining = True  # no more work here; the reader reports how it ended
            raise NotSent(
                Code.UNAVAILABLE, f"worker for {self.describe()} closed its connection"
            ) from None
        if self.execute_timeout > 0:
            done, _ = await asyncio.wait({future}, timeout=self.execute_timeout)
            if not done:
                # A hung model: the worker is killed (which fails this batch) and replaced.
                await self.kill(
                    f"{self.describe()}: execute() did not return within "
                    f"{self.execute_timeout:g}s; the instance was killed and is being replaced"
                )
        result = await future
        self.stats.executed(
            len(batch), copy_ns + result.input_ns, result.infer_ns, result.output_ns
        )
        return self._results(batch, result, blocks)

    def _results(
        self, batch: list[PreparedRequest], result: wpb.ExecuteResult, blocks: list[Block]
    ) -> list[InferResult | PbdError]:
        by_id = {r.request_id: r for r in result.responses}
        outstanding = 0
        results: list[InferResult | PbdError] = []

        def release_one() -> None:
            nonlocal outstanding
            outstanding -= 1
            if outstanding == 0:
                self._release(result.batch_id, blocks)

        for request_id, prepared in enumerate(batch):
            response = by_id.get(request_id)
            if response is None:
                results.append(PbdError(Code.INTERNAL, f"{self.describe()} returned no response"))
            elif response.HasField("error"):
                err = response.error
                if err.traceback:
                    log.debug("%s: model error traceback:\n%s", self.describe(), err.traceback)
                results.append(PbdError(Code.parse(err.code), err.message))
            else:
                try:
                    targets = prepared.output_targets
                    outputs = [
                        self.memory.output(ref, ref.name in targets) for ref in response.outputs
                    ]
                except ValueError as exc:
                    results.append(PbdError(Code.INTERNAL, f"{self.describe()}: {exc}"))
                    continue
                outstanding += 1
                results.append(
                    InferResult(
                        model_name=self.config.name,
                        model_version=str(self.version),
                        id=prepared.request.id,
                        outputs=outputs,
                        parameters=_json_params(response.parameters_json),
                        _release=release_one,
                    )
                )
        if outstanding == 0:
            self._release(result.batch_id, blocks)
        return results

    def _release(self, batch_id: int, blocks: list[Block]) -> None:
        """Free the inputs now; tell the worker with the next Execute, or after a moment."""
        self.memory.free(blocks)
        self._to_release.append(batch_id)
        if self._release_timer is None:
            self._release_timer = asyncio.get_running_loop().call_later(
                RELEASE_DELAY_S, self._flush_release
            )

    def _flush_release(self) -> None:
        self._release_timer = None
        if self._to_release and self.state is State.READY and self.conn is not None:
            ids, self._to_release = self._to_release, []
            with contextlib.suppress(PbdError):
                self.conn.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=ids)))

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """finalize() the model (up to ``grace`` seconds), then end the process."""
        if self.state is State.READY and self.conn is not None:
            self.state = State.STOPPED
            with contextlib.suppress(PbdError, ConnectionError):
                self.conn.send(wpb.DaemonToWorker(finalize=wpb.Finalize()))
            if self._reader is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self._reader), grace)
        self.state = State.STOPPED
        await self._terminate(grace=min(grace, 5.0))
        # Batches the worker never answered: their callers get an answer, not silence.
        stopped = unavailable(f"{self.describe()} was stopped before execute() returned")
        for future, blocks in self._pending.values():
            if not future.done():
                future.set_exception(stopped)
            self.memory.free(blocks)
        self._pending.clear()

    async def _terminate(self, grace: float) -> None:
        if self.handle is not None:
            await self.launcher.stop(self.handle, grace)
        if self.conn is not None:
            self.conn.close()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        self.memory.close()


def _json_params(text: str) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
