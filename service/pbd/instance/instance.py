"""One model instance: a worker process running one copy of a model, and the daemon's parts
for it.

:class:`Instance` starts the worker (launch, wait for it to connect, ``initialize()``), routes
what the worker sends, runs batches and stops the worker. What it holds are parts that own
their state: ``memory`` (the arena inputs are copied into, the map of the worker's outputs),
``requests`` (the requests in the worker, by id: streamed responses, cancellation),
``batches`` (the batches in the worker, the room they take and what each result turns into),
``releases`` (outputs the worker may reuse) and ``readiness`` (the model's ``is_ready()``).

Request inputs are copied once, from the gRPC message into this instance's arena; the worker
reads them in place. Outputs are read in place from the worker's segments by the caller of
``execute`` and handed back (``Release``) when the caller is done with them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pbd.errors import Code, PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv
from pbd.instance.custom_metrics import CustomMetrics
from pbd.instance.hooks import ReadinessProbe, await_finalize, log_finalized
from pbd.instance.inflight import InFlight, InFlightBatches
from pbd.instance.memory import InstanceMemory
from pbd.instance.messages import execute_message, initialize_message
from pbd.instance.records import InstancePlan, NotSent, State
from pbd.instance.requests import SentRequests
from pbd.instance.warmup import WarmupSample, warm_up, warmup_samples
from pbd.logsettings import runtime_settings
from pbd.modelconfig.model import ModelConfig
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.tracing.provider import Tracing
from pbd.types import InferResult, PreparedRequest
from pbd.worker.connect import connected_or_exited
from pbd.worker.hub import WorkerHub
from pbd.worker.launcher import InstanceLauncher, WorkerHandle, WorkerSpec, describe_exit
from pbd.worker.link import WorkerLink
from pbd.worker_client.describe import Held
from pbd.worker_client.releases import PendingReleases
from pbd_wire import TOKEN_ENV
from pbd_wire import worker_pb2 as wpb

log = logging.getLogger("pbd.instances")
# The worker-to-daemon messages that are BLS: an instance hands these to its ``bls`` sink.
BLS_KINDS = frozenset({"bls_call", "bls_done", "bls_control", "bls_cancel", "pool_alloc"})
# What a worker may send ahead of its Initialized reply.
_BEFORE_INITIALIZED = frozenset({"metrics", "heartbeat", "spans"})


def progress_marks() -> Iterator[float]:
    """Seconds into a long initialize() at which its progress is logged: after 10 s, 30 s,
    60 s, then every minute."""
    yield from (10.0, 30.0)
    yield from itertools.count(60.0, 60.0)


class DirectRoutes(Protocol):
    """Where front ends send requests straight to workers (``pbd.fronts.routes``): an instance
    gets a socket for them when it starts, says when it can take their requests, and is taken
    out of their table before it stops."""

    def socket_for(self, instance: Instance) -> tuple[str, str]:
        """A fresh (socket, token) for the worker's front ends."""

    def changed(self) -> None:
        """An instance became ready or went away: the front ends hear of it soon."""

    async def withdraw(self, instance: Instance, timeout: float) -> bool:
        """Return once no front end sends to ``instance``: True once what they sent there is
        answered, False when ``timeout`` passed first (its execute() may be running)."""

    def inflight_at(self, instance: Instance) -> int:
        """Requests front ends sent straight to ``instance`` and have not had answered yet,
        as far as the daemon knows now (for load-driven scaling)."""

    def gone(self, instance: Instance, message: str) -> None:
        """``instance``'s worker is gone: what front ends sent it fails with ``message``."""


class BlsSink(Protocol):
    """Where an instance hands its worker's BLS messages (``pbd.bls.service.BlsService``: a
    model's call re-enters the daemon at the dataplane, far above the instances)."""

    def on_message(self, caller: Instance, message: wpb.WorkerToDaemon) -> None: ...


@dataclass(frozen=True)
class InstanceServices:
    """What the daemon lends every instance: built once, given to each version, which gives it
    to each of its instances when it makes them."""

    settings: Settings
    launcher: InstanceLauncher
    hub: WorkerHub
    shm_name: Callable[[], str]  # a fresh base name for an instance's segments
    gpus: list[int] = field(default_factory=list)  # the GPUs instances may be placed on
    custom_metrics: CustomMetrics = field(default_factory=CustomMetrics)
    tracing: Tracing | None = None
    bls: BlsSink | None = None
    routes: DirectRoutes | None = None  # front-end processes with the direct path


class Instance:
    def __init__(
        self,
        *,
        config: ModelConfig,
        version: int,
        model_dir: Path,
        plan: InstancePlan,
        services: InstanceServices,
        stats: ModelStats | None = None,
        execute_timeout: float = 0.0,
        memory_limit: int = 0,
        worker_env: WorkerEnv | None = None,
        on_capacity: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.version = version
        self.model_dir = model_dir
        self.plan = plan
        self.services = services
        self.settings = settings = services.settings
        self.launcher = services.launcher
        self.on_capacity = on_capacity  # it can take work: ready, or room given back
        self.worker_env = worker_env  # run under the model's own Python environment
        self.id = f"{config.name}/{version}/{plan.name}"
        self.state = State.STARTING
        self.reason = ""
        self.died = asyncio.Event()
        self.handle: WorkerHandle | None = None
        self.conn: WorkerLink | None = None
        self.execute_timeout = execute_timeout
        self.memory_limit = memory_limit  # bytes of private memory the worker may use; 0: any
        self.exit_why = ""  # what the worker said (Exiting) before it went away
        self.last_seen = 0.0
        self.adopted = False  # a running worker re-attached instead of a fresh initialize()
        self.executed = 0
        self.draining = False  # being scaled away: finishes its work, takes no more
        self.warming = False  # running its model_warmup samples: takes no requests yet
        self.disconnected = asyncio.Event()  # the worker's connection ended
        self.front: tuple[str, str] = ("", "")  # its socket for front ends, and their token
        # BLS calls its worker made and waits on: it is in execute(), whatever it runs (a
        # request a front end sent it directly is not in ``batches``).
        self.calling = 0
        self._ending: asyncio.Task[None] | None = None
        self._hung: asyncio.Task[None] | None = None  # killing it: its execute() ran too long
        self.custom_metrics = services.custom_metrics.session(self.id)
        description = self.describe()
        self.memory = InstanceMemory(services.shm_name(), settings)
        self.releases = PendingReleases(self._send_release)
        self.requests = SentRequests(
            model_name=config.name,
            version=version,
            memory=self.memory,
            releases=self.releases,
            tell=self._tell,
        )
        self.batches = InFlightBatches(
            config=config,
            version=version,
            description=description,
            span_attributes={
                "model.name": config.name,
                "model.version": version,
                "model.instance": plan.name,
            },
            memory=self.memory,
            requests=self.requests,
            releases=self.releases,
            stats=stats if stats is not None else ModelStats(),
            on_capacity=on_capacity,
        )
        self.readiness = ReadinessProbe(description, self.batches)

    @property
    def pid(self) -> int | None:
        if self.conn is not None:
            return self.conn.pid
        return self.handle.pid if self.handle is not None else None

    @property
    def live(self) -> bool:
        """Serving, its worker connected."""
        return self.state is State.READY and self.conn is not None

    def direct_inflight(self) -> int:
        """Requests front ends sent straight to this instance's worker, not answered yet."""
        routes = self.services.routes
        return routes.inflight_at(self) if routes is not None else 0

    def describe(self) -> str:
        return f"instance '{self.plan.name}' of model '{self.config.name}' version {self.version}"

    # -- start -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the worker and run initialize(); raises PbdError with the model's error.

        Under systemd the worker may already run, initialized for the previous daemon: it
        re-attaches (``adopted``) without initialize() when the model and arguments match (and
        without model_warmup when an earlier daemon saw its warmup end); a worker of an older
        configuration exits instead, and systemd starts a fresh one. Once ready (warmed up),
        the instance tells ``on_capacity`` that it can take work."""
        began = time.perf_counter()
        self._loop = asyncio.get_running_loop()
        hub = self.services.hub
        # model_warmup's data is made first, as Triton makes it before the instance starts.
        warmup = warmup_samples(self.config, self.model_dir)
        token = self.launcher.token(self.id)
        connected = hub.expect(self.id, token)
        warmed_up = False  # an adopted worker's earlier daemon saw its warmup end
        routes = self.services.routes
        if routes is not None:
            self.front = routes.socket_for(self)
        try:
            env = self.worker_env
            self.handle = handle = await self.launcher.start(
                WorkerSpec(
                    self.id,
                    hub.address,
                    {TOKEN_ENV: token, **(env.variables if env else {})},
                    memory_limit=self.memory_limit,
                    python=env.python if env else "",
                )
            )
            vouched = self.launcher.vouched_pid(handle)
            if vouched:
                hub.vouch(self.id, vouched)
            for attempt in range(2):
                conn = self.conn = await connected_or_exited(
                    self.launcher,
                    handle,
                    connected,
                    self.settings.worker_start_timeout_secs,
                    f"worker for {self.describe()}",
                )
                reply = await self._initialize(conn)
                if not reply.HasField("error"):
                    self.adopted, warmed_up = reply.adopted, reply.warmed_up
                    break
                err = reply.error
                assert conn.hello is not None  # the hub hands over a link after its hello
                if conn.hello.initialized and attempt == 0:
                    log.info("%s: %s", self.describe(), err.message)
                    conn.close()
                    # The restarted worker presents the token its unit has now.
                    connected = hub.expect(self.id, self.launcher.token(self.id))
                    continue
                if err.traceback:
                    log.error("%s failed to initialize:\n%s", self.describe(), err.traceback)
                raise PbdError(Code.parse(err.code), err.message)
        except BaseException:
            hub.forget(self.id)
            await self._terminate(grace=1.0)
            self.state = State.DEAD
            raise
        self.state = State.READY
        self.last_seen = self._loop.time()
        conn.attach(self.on_message)
        if warmup and not warmed_up:
            # An adopted worker whose warmup an earlier daemon did not see end (it died
            # meanwhile) runs it again: it counts as ready only once warmed up.
            await self._warm_up(warmup)
        log.info(
            "%s ready in %.1f ms (pid %s%s)",
            self.describe(),
            (time.perf_counter() - began) * 1e3,
            self.pid,
            ", re-attached without re-initializing" if self.adopted else "",
        )
        if self.on_capacity is not None:
            self.on_capacity()
        if routes is not None:
            routes.changed()

    async def _initialize(self, conn: WorkerLink) -> wpb.Initialized:
        """Send Initialize; the reply (model metric families it makes come first)."""
        self.push_runtime_settings()
        init = initialize_message(
            self.config, self.version, self.plan, self.model_dir, self.settings, self.memory
        )
        init.front_socket, init.front_token = self.front
        init.execute_timeout_ms = round(self.execute_timeout * 1000)
        self._hung = None
        conn.send(wpb.DaemonToWorker(initialize=init))
        limit = self.settings.model_init_timeout_secs
        began = self._loop.time()
        deadline = began + limit
        marks = progress_marks()
        mark = began + next(marks)
        while True:
            try:
                reply = await asyncio.wait_for(
                    conn.recv(), max(min(deadline, mark) - self._loop.time(), 0.0)
                )
            except TimeoutError:
                if self._loop.time() >= deadline:
                    raise unavailable(
                        f"{self.describe()}: initialize() did not finish in {limit:g}s"
                    ) from None
                log.info(
                    "still loading %s: initialize() running for %.0f s (pid %s; "
                    "--model-init-timeout-secs %g)",
                    self.describe(),
                    self._loop.time() - began,
                    conn.pid,
                    limit,
                )
                mark = began + next(marks)
                continue
            if reply is None:
                raise unavailable(
                    f"worker for {self.describe()} {await self.exit_text()} during initialize()"
                )
            kind = reply.WhichOneof("kind")
            if kind not in _BEFORE_INITIALIZED:
                break
            # A worker that re-attaches may still send what it had for the previous daemon
            # (spans, a heartbeat); they are no reply, so they are taken as they would be later.
            self.on_message(reply)
        if reply.WhichOneof("kind") != "initialized":
            raise PbdError(
                Code.INTERNAL,
                f"{self.describe()}: unexpected first reply ({reply.WhichOneof('kind')})",
            )
        return reply.initialized

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
        self._tell(wpb.DaemonToWorker(warmed_up=wpb.WarmedUp()))

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
            self.batches.on_result(message.result)
        elif kind == "streamed":
            self.requests.on_frame(message.streamed)
        elif kind == "heartbeat":
            heartbeat = message.heartbeat
            self.executed = heartbeat.executed
            if heartbeat.overdue_ms and self.execute_timeout > 0 and self._hung is None:
                # Its execute() ran past the limit, whoever sent the batch (a front end's
                # requests on the direct path included): killed and replaced.
                self._hung = asyncio.ensure_future(self.kill(self._hung_words()))
        elif kind == "metrics":
            self.on_metrics(message.metrics)
        elif kind == "spans" and self.services.tracing is not None:
            self.services.tracing.import_spans(message.spans.otlp)
        elif kind == "exiting":
            self.exit_why = message.exiting.error.message
        elif kind == "ready_reply":
            self.readiness.answered(message.ready_reply)
        elif kind == "finalized":
            log_finalized(self.describe(), message.finalized)
        elif kind in BLS_KINDS and self.services.bls is not None:
            self.services.bls.on_message(self, message)

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
        self.batches.fail_all(unavailable(reason))
        self.died.set()
        if self.services.routes is not None:
            self.services.routes.gone(self, reason)
            self.services.routes.changed()
        if self.handle is not None:
            await self.launcher.abort(self.handle)
        self._release_resources()

    def _hung_words(self) -> str:
        return (
            f"{self.describe()}: execute() did not return within {self.execute_timeout:g}s; "
            "the instance was killed and is being replaced"
        )

    async def kill(self, reason: str) -> None:
        """Declare the worker dead (hung, or silent) and make sure the process is gone."""
        if self.state is State.READY:
            await self._lost(reason)

    def push_runtime_settings(self) -> None:
        """Tell the worker the current log settings (at start, and after LogSettings)."""
        self._tell(wpb.DaemonToWorker(settings=runtime_settings(self.settings)))

    def forget_cuda_region(self, generation: int) -> None:
        """A client's CUDA region is gone: the worker closes its handle if it opened it."""
        closed = wpb.CudaRegionsClosed(generations=[generation])
        self._tell(wpb.DaemonToWorker(cuda_closed=closed))

    def _tell(self, message: wpb.DaemonToWorker) -> None:
        """News for the worker, dropped when it has none (not connected, or gone)."""
        if self.conn is not None and self.state is not State.DEAD:
            self.conn.tell(message)

    def heartbeat_overdue(self, now: float) -> bool:
        return self.state is State.READY and now - self.last_seen > (
            self.settings.worker_heartbeat_timeout_secs
        )

    async def ready_checked(self) -> bool:
        """ModelReady for this instance: live, and the model's ``is_ready()`` agrees."""
        return await self.readiness.check(self.conn if self.live else None)

    async def execute(
        self, batch: list[PreparedRequest], in_order: bool = True
    ) -> list[InferResult | PbdError]:
        """Run ``batch`` on the worker; one result or error per request, in order.
        ``in_order=False``: the caller hands each result on as it comes (the default
        scheduler), so a lone request may be answered as soon as its result is read
        (``pbd.instance.inflight``); a scheduler that orders answers keeps that to itself."""
        batch_id, flight = self.send(batch, in_order)
        return await self.finish(batch_id, flight)

    def send(
        self,
        batch: list[PreparedRequest],
        in_order: bool = True,
        future: asyncio.Future[Any] | None = None,
    ) -> tuple[int, InFlight]:
        """The first half of :meth:`execute`: ``batch``'s Execute sent to the worker, its
        room already taken. ``future`` is what the result resolves (a new one by default):
        a request the dispatch sends from its queue is answered through the future its
        caller already waits on (``pbd.version.dispatch``). NotSent when it never left."""
        batches = self.batches
        if self.state is not State.READY or self.conn is None:
            # It died between being picked and this call: nothing was sent.
            batches.free_room()
            raise NotSent(Code.UNAVAILABLE, f"{self.describe()} is not ready")
        batch_id = batches.new_id()
        blocks: list[Held] = []
        copy_began = time.perf_counter_ns()
        requests = self.requests
        request_ids = [requests.register(prepared) for prepared in batch]
        try:
            frame = execute_message(self.memory, batch_id, batch, request_ids, blocks)
        except PbdError:
            requests.forget(request_ids)
            batches.free_room()
            raise
        if future is None:
            future = self._loop.create_future()
        released = self.releases.take()
        if released:
            frame.execute.release.extend(released)
        flight = InFlight.of(
            future, blocks, batch, request_ids, time.perf_counter_ns() - copy_began, in_order
        )
        batches.sent(batch_id, flight)
        try:
            self.conn.send(frame)
        except PbdError:
            # The worker died and the reader has not seen it yet: the batch never left.
            batches.not_sent(batch_id)
            self.draining = True  # no more work here; the reader reports how it ended
            raise NotSent(
                Code.UNAVAILABLE, f"worker for {self.describe()} closed its connection"
            ) from None
        return batch_id, flight

    async def finish(self, batch_id: int, flight: InFlight) -> list[InferResult | PbdError]:
        """The second half of :meth:`execute`: the sent batch's outcomes once its result is
        in (the worker killed and replaced if execute() takes longer than its timeout)."""
        future = flight.future
        try:
            if self.execute_timeout > 0:
                done, _ = await asyncio.wait({future}, timeout=self.execute_timeout)
                if not done:
                    # A hung model: the worker is killed (which fails this batch) and replaced.
                    await self.kill(self._hung_words())
            result = await future
        except asyncio.CancelledError:
            self.batches.abandon(batch_id, flight)
            raise
        return await self.outcomes(flight, result)

    async def outcomes(
        self, flight: InFlight, result: wpb.ExecuteResult
    ) -> list[InferResult | PbdError]:
        """What the sent batch's ``result`` gives each of its requests."""
        outcomes = flight.outcomes
        if outcomes is None:
            outcomes = self.batches.settle(flight, result)
        return await self.requests.resolve(outcomes)

    def _send_release(self, ids: list[int]) -> None:
        if self.state is State.READY and self.conn is not None:
            self.conn.tell(wpb.DaemonToWorker(release=wpb.Release(batch_ids=ids)))

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace: float, why: str = "") -> None:
        """finalize() the model (up to --model-finalize-timeout-secs), then end the process
        (SIGTERM, SIGKILL after ``grace``, 5 s at most); or, while the
        daemon restarts under systemd, let go of a running worker without finalize().
        Requests still executing fail with a message that ends with ``why``."""
        routes = self.services.routes
        direct_busy = False
        if routes is not None and self.state is State.READY:
            # Front ends stop sending here, and what they sent is answered, before it goes.
            self.draining = True
            direct_busy = not await routes.withdraw(self, grace)
        if self.launcher.detaching and self.state is State.READY:
            self.state = State.STOPPED
            self._release_resources()
            return
        if (
            self.state is State.READY
            and self.conn is not None
            and (self.batches.inflight or direct_busy)
        ):
            # finalize() would only run after execute() returns: waiting for it blames
            # finalize() for execute()'s time and lets pipelined requests start meanwhile.
            log.warning("%s: execute() still running; stopping its worker without finalize()",
                        self.describe())  # fmt: skip
        elif self.state is State.READY and self.conn is not None:
            self.state = State.STOPPED
            self.conn.tell(wpb.DaemonToWorker(finalize=wpb.Finalize()))
            timeout = self.settings.model_finalize_timeout_secs
            await await_finalize(self.describe(), self.disconnected, timeout)
        self.state = State.STOPPED
        await self._terminate(grace=min(grace, 5.0))
        # Batches the worker never answered: their callers get an answer, not silence.
        stopped = f"{self.describe()} was stopped before execute() returned{why}"
        self.batches.fail_all(unavailable(stopped))
        if routes is not None:
            routes.gone(self, stopped)

    async def _terminate(self, grace: float) -> None:
        if self.handle is not None:
            await self.launcher.stop(self.handle, grace)
        self._release_resources()

    def _release_resources(self) -> None:
        self.custom_metrics.close()
        if self.conn is not None:
            self.conn.close()
        self.memory.close()
