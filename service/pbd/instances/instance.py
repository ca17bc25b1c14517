"""One model instance: a worker process and the daemon's connection to it.

Request inputs are copied once, from the gRPC message into this instance's arena; the worker
reads them in place. Outputs are read in place from the worker's segments by the caller of
``execute`` and handed back (``Release``) when the caller is done with them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pbd.bls.kinds import KINDS as BLS_KINDS
from pbd.errors import Code, PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv
from pbd.instances.error_log import ErrorBucket
from pbd.instances.hooks import ReadinessProbe, await_finalize, log_finalized
from pbd.instances.hub import WorkerHub
from pbd.instances.inflight import InFlight, abandon_settled, settle, settle_early
from pbd.instances.launcher import InstanceLauncher, WorkerHandle, WorkerSpec, describe_exit
from pbd.instances.memory import InstanceMemory
from pbd.instances.messages import execute_message, initialize_message
from pbd.instances.records import InstancePlan, NotSent, State
from pbd.instances.releases import PendingReleases
from pbd.instances.startup import initialize_worker, wait_connected
from pbd.instances.streaming import InstanceStreams
from pbd.instances.warmup import WarmupSample, warm_up, warmup_samples
from pbd.instances.worker_link import WorkerLink
from pbd.logsettings import runtime_settings
from pbd.metrics.custom import CustomMetrics
from pbd.repository.config import ModelConfig
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.tracing.provider import Tracing
from pbd.types import InferResult, PreparedRequest
from pbd_wire import TOKEN_ENV
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Block

log = logging.getLogger("pbd.instances")
# Under load the next Execute carries releases; an idle worker gets them after this long.


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
        custom_metrics: CustomMetrics | None = None,
        tracing: Tracing | None = None,
        memory_limit: int = 0,
        worker_env: WorkerEnv | None = None,
        on_capacity: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.on_capacity = on_capacity  # room in the pipeline was given back
        self.worker_env = worker_env  # run under the model's own Python environment
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
        self.conn: WorkerLink | None = None
        self.memory = InstanceMemory(shm_base, settings)
        self.stats = stats if stats is not None else ModelStats()
        self.execute_timeout = execute_timeout
        registry = custom_metrics if custom_metrics is not None else CustomMetrics()
        self.custom_metrics = registry.session(self.id)
        self.tracing = tracing
        self.memory_limit = memory_limit  # bytes of private memory the worker may use; 0: any
        self.exit_why = ""  # what the worker said (Exiting) before it went away
        self.last_seen = 0.0
        self.adopted = False  # a running worker re-attached instead of a fresh initialize()
        self.executed = 0
        # Room taken in the pipeline: batches given to this instance (by its dispatch) and not
        # answered yet; given back by :meth:`_free_room`.
        self.inflight = 0
        self.draining = False  # being scaled away: finishes its work, takes no more
        self.warming = False  # running its model_warmup samples: takes no requests yet
        self._batch_ids = itertools.count(1)
        self._pending: dict[int, InFlight] = {}  # by batch id
        self.releases = PendingReleases(self._send_release)
        self.disconnected = asyncio.Event()  # the worker's connection ended
        self._ending: asyncio.Task[None] | None = None
        self.span_attributes: dict[str, object] = {
            "model.name": config.name,
            "model.version": version,
            "model.instance": plan.name,
        }
        self.readiness = ReadinessProbe(self)
        self.streams = InstanceStreams(self)  # request ids, streamed responses, cancellation
        self.error_bucket = ErrorBucket()  # how many failed batches it may still log

    @property
    def pid(self) -> int | None:
        if self.conn is not None:
            return self.conn.pid
        return self.handle.pid if self.handle is not None else None

    def describe(self) -> str:
        return f"instance '{self.plan.name}' of model '{self.config.name}' version {self.version}"

    # -- start -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the worker and run initialize(); raises PbdError with the model's error.

        Under systemd the worker may already run, initialized for the previous daemon: it
        re-attaches (``adopted``) without initialize() when the model and arguments match; a
        worker of an older configuration exits instead, and systemd starts a fresh one."""
        began = time.perf_counter()
        self._loop = asyncio.get_running_loop()
        # model_warmup's data is made first, as Triton makes it before the instance starts.
        warmup = warmup_samples(self.config, self.model_dir)
        token = self.launcher.token(self.id)
        connected = self.hub.expect(self.id, token)
        try:
            env = self.worker_env
            self.handle = await self.launcher.start(
                WorkerSpec(
                    self.id,
                    self.hub.address,
                    {TOKEN_ENV: token, **(env.variables if env else {})},
                    memory_limit=self.memory_limit,
                    python=env.python if env else "",
                )
            )
            for attempt in range(2):
                conn = self.conn = await wait_connected(self, connected)
                reply = await initialize_worker(self, initialize_message(self))
                if not reply.HasField("error"):
                    self.adopted = reply.adopted
                    break
                err = reply.error
                assert conn.hello is not None  # the hub hands over a link after its hello
                if conn.hello.initialized and attempt == 0:
                    log.info("%s: %s", self.describe(), err.message)
                    conn.close()
                    connected = self.hub.expect(self.id, token)
                    continue
                if err.traceback:
                    log.error("%s failed to initialize:\n%s", self.describe(), err.traceback)
                raise PbdError(Code.parse(err.code), err.message)
        except BaseException:
            self.hub.forget(self.id)
            await self._terminate(grace=1.0)
            self.state = State.DEAD
            raise
        self.state = State.READY
        self.last_seen = self._loop.time()
        conn.attach(self.on_message)
        if warmup and not self.adopted:
            await self._warm_up(warmup)
        log.info(
            "%s ready in %.1f ms (pid %s%s)",
            self.describe(),
            (time.perf_counter() - began) * 1e3,
            self.pid,
            ", re-attached without re-initializing" if self.adopted else "",
        )

    async def _warm_up(self, samples: list[WarmupSample]) -> None:
        """Run the model_warmup samples before this instance takes requests; a failure stops
        it and fails its start (Triton's message)."""
        self.warming = True
        try:
            await warm_up(self, samples)
        except BaseException:
            await self._terminate(grace=1.0)
            self.state = State.DEAD
            raise
        finally:
            self.warming = False

    # -- running -------------------------------------------------------------------------------

    def on_message(self, message: wpb.WorkerToDaemon | None) -> None:
        """Every message of the running worker, as its link reads it (None: it is gone)."""
        if message is None:
            self.disconnected.set()
            if self.state is State.READY and self._ending is None:
                self._ending = asyncio.ensure_future(self._connection_ended())
            return
        self.last_seen = self._loop.time()
        kind = message.WhichOneof("kind")
        if kind == "result":
            batch_id = message.result.batch_id
            flight = self._pending.pop(batch_id, None)
            if flight is not None:
                if flight.future.done():  # the caller was cancelled; nobody reads the outputs
                    self.release_batch(batch_id, flight.blocks)
                elif flight.early:
                    settle_early(self, flight, message.result)
                else:
                    flight.future.set_result(message.result)
                self._free_room()
        elif kind == "streamed":
            self.streams.on_frame(message.streamed)
        elif kind == "heartbeat":
            self.executed = message.heartbeat.executed
        elif kind == "metrics":
            self.on_metrics(message.metrics)
        elif kind == "spans" and self.tracing is not None:
            self.tracing.import_spans(message.spans.otlp)
        elif kind == "exiting":
            self.exit_why = message.exiting.error.message
        elif kind == "ready_reply":
            self.readiness.answered(message.ready_reply)
        elif kind == "finalized":
            log_finalized(self, message.finalized)
        elif kind in BLS_KINDS and self.hub.bls is not None:
            self.hub.bls.on_message(self, message)

    async def _connection_ended(self) -> None:
        if self.state is State.READY:
            await self._lost(f"worker for {self.describe()} {await self.exit_text()}")

    def on_metrics(self, updates: wpb.MetricUpdates) -> None:
        reply = self.custom_metrics.apply(updates)
        if reply is not None and self.conn is not None:
            self.conn.tell(wpb.DaemonToWorker(metric_reply=reply))

    async def exit_text(self) -> str:
        if self.handle is None:
            return "is gone"
        status = await self.launcher.wait(self.handle, 2.0)
        return describe_exit(status, self.exit_why, self.memory_limit)

    async def _lost(self, reason: str) -> None:
        self.state = State.DEAD
        self.reason = reason
        log.error("%s", reason)
        self._fail_pending(unavailable(reason))
        self.died.set()
        if self.handle is not None:
            await self.launcher.abort(self.handle)
        self._release_resources()

    async def kill(self, reason: str) -> None:
        """Declare the worker dead (hung, or silent) and make sure the process is gone."""
        if self.state is State.READY:
            await self._lost(reason)

    def push_runtime_settings(self) -> None:
        """Tell the worker the current log settings (at start, and after LogSettings)."""
        if self.conn is not None and self.state is not State.DEAD:
            self.conn.tell(wpb.DaemonToWorker(settings=runtime_settings(self.settings)))

    def forget_cuda_region(self, generation: int) -> None:
        """A client's CUDA region is gone: the worker closes its handle if it opened it."""
        if self.conn is not None and self.state is not State.DEAD:
            closed = wpb.CudaRegionsClosed(generations=[generation])
            self.conn.tell(wpb.DaemonToWorker(cuda_closed=closed))

    def heartbeat_overdue(self, now: float) -> bool:
        return self.state is State.READY and now - self.last_seen > (
            self.settings.worker_heartbeat_timeout_secs
        )

    async def execute(
        self, batch: list[PreparedRequest], in_order: bool = True
    ) -> list[InferResult | PbdError]:
        """Run ``batch`` on the worker; one result or error per request, in order.
        ``in_order=False``: the caller hands each result on as it comes (the default
        scheduler), so a lone request may be answered as soon as its result is read
        (``pbd.instances.inflight``); a scheduler that orders answers keeps that to itself."""
        if self.state is not State.READY or self.conn is None:
            # It died between being picked and this call: nothing was sent.
            self._free_room()
            raise NotSent(Code.UNAVAILABLE, f"{self.describe()} is not ready")
        batch_id = next(self._batch_ids)
        blocks: list[Block] = []
        copy_began = time.perf_counter_ns()
        request_ids = [self.streams.register(prepared) for prepared in batch]
        try:
            frame = execute_message(self.memory, batch_id, batch, request_ids, blocks)
        except PbdError:
            self.streams.forget(request_ids)
            self._free_room()
            raise
        future: asyncio.Future[wpb.ExecuteResult] = self._loop.create_future()
        released = self.releases.take()
        if released:
            frame.execute.release.extend(released)
        flight = InFlight.of(
            future, blocks, batch, request_ids, time.perf_counter_ns() - copy_began, in_order
        )
        self._pending[batch_id] = flight
        try:
            self.conn.send(frame)
        except PbdError:
            # The worker died and the reader has not seen it yet: the batch never left.
            self._pending.pop(batch_id, None)
            self.memory.free(blocks)
            self.streams.forget(request_ids)
            self._free_room()
            self.draining = True  # no more work here; the reader reports how it ended
            raise NotSent(
                Code.UNAVAILABLE, f"worker for {self.describe()} closed its connection"
            ) from None
        try:
            if self.execute_timeout > 0:
                done, _ = await asyncio.wait({future}, timeout=self.execute_timeout)
                if not done:
                    # A hung model: the worker is killed (which fails this batch) and replaced.
                    await self.kill(
                        f"{self.describe()}: execute() did not return within "
                        f"{self.execute_timeout:g}s; the instance was killed and is being replaced"
                    )
            result = await future
        except asyncio.CancelledError:
            self._abandon(batch_id, flight)
            raise
        outcomes = flight.outcomes
        if outcomes is None:
            outcomes = settle(self, flight, result)
        return await self.streams.resolve(outcomes)

    def _abandon(self, batch_id: int, flight: InFlight) -> None:
        """The caller gave up while its batch was in the worker: the worker is told, and the
        batch's memory comes back when (or, if it came already, now that) its result is in."""
        future = flight.future
        if flight.outcomes is not None:
            abandon_settled(self, flight)
            return
        if not future.done():
            future.cancel()  # the result frame then releases the batch unread
        elif not future.cancelled() and future.exception() is None:
            self.release_batch(batch_id, flight.blocks)
        for request_id in flight.request_ids:
            self.streams.cancel(request_id)
        self.streams.forget(flight.request_ids)

    def release_batch(self, batch_id: int, blocks: list[Block], worker_holds: bool = True) -> None:
        """Free the inputs now; tell the worker with the next Execute, or after a moment,
        unless it holds nothing for the batch (no output in its arena)."""
        self.memory.free(blocks)
        if worker_holds:
            self.releases.add(batch_id)

    def _send_release(self, ids: list[int]) -> None:
        if self.state is State.READY and self.conn is not None:
            self.conn.tell(wpb.DaemonToWorker(release=wpb.Release(batch_ids=ids)))

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace: float, why: str = "") -> None:
        """finalize() the model (up to --model-finalize-timeout-secs), then end the process
        (SIGTERM, SIGKILL after ``grace``, 5 s at most); or, while the
        daemon restarts under systemd, let go of a running worker without finalize().
        Requests still executing fail with a message that ends with ``why``."""
        if self.launcher.detaching and self.state is State.READY:
            self.state = State.STOPPED
            self._release_resources()
            return
        if self.state is State.READY and self.conn is not None and self.inflight:
            # finalize() would only run after execute() returns: waiting for it blames
            # finalize() for execute()'s time and lets pipelined requests start meanwhile.
            log.warning("%s: execute() still running; stopping its worker without finalize()",
                        self.describe())  # fmt: skip
        elif self.state is State.READY and self.conn is not None:
            self.state = State.STOPPED
            self.conn.tell(wpb.DaemonToWorker(finalize=wpb.Finalize()))
            timeout = self.settings.model_finalize_timeout_secs
            await await_finalize(self, self.disconnected, timeout)
        self.state = State.STOPPED
        await self._terminate(grace=min(grace, 5.0))
        # Batches the worker never answered: their callers get an answer, not silence.
        self._fail_pending(
            unavailable(f"{self.describe()} was stopped before execute() returned{why}")
        )

    def _fail_pending(self, error: PbdError) -> None:
        """The worker is gone: every batch it had fails with ``error``, and its room is free."""
        pending, self._pending = self._pending, {}
        for flight in pending.values():
            if not flight.future.done():
                flight.future.set_exception(error)
            self.memory.free(flight.blocks)
            self._free_room()
        self.streams.fail_all(error)

    def _free_room(self) -> None:
        self.inflight -= 1
        if self.on_capacity is not None:
            self.on_capacity()

    async def _terminate(self, grace: float) -> None:
        if self.handle is not None:
            await self.launcher.stop(self.handle, grace)
        self._release_resources()

    def _release_resources(self) -> None:
        self.custom_metrics.close()
        if self.conn is not None:
            self.conn.close()
        self.memory.close()
