"""The daemon's life: start, load models, serve, and shut down in order.

Shutdown (SIGTERM/SIGINT): stop accepting requests, let those in flight finish (up to
``exit_timeout_secs``; after that the queued ones are refused with UNAVAILABLE and the running
ones end with their instances, so every accepted request gets an answer), finalize models and
stop workers, remove every shared-memory segment.
Under systemd with the systemd launcher, a SIGTERM that comes from `systemctl restart pbd`
leaves the instance units running instead; the next daemon re-attaches to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from pathlib import Path
from typing import Any

from pbd import status_line
from pbd.bls.service import BlsService
from pbd.dataplane import DataPlane
from pbd.ensemble.runtime import EnsembleRuntime, Ensembles
from pbd.errors import PbdError, unavailable
from pbd.fronts.routes import Routes
from pbd.fronts.supervisor import Fronts
from pbd.gpus import visible_gpus
from pbd.grpc.restricted import grpc_restrictions
from pbd.grpc.server import build_server, tls_context
from pbd.http.restricted import HttpRestrictions
from pbd.http.server import HttpFrontend
from pbd.instance.custom_metrics import CustomMetrics
from pbd.instance.instance import InstanceServices
from pbd.listeners import bind_tcp, grpc_sockets, http_sockets, tcp_port
from pbd.memory.client_shm import ClientShmRegistry, CudaRegion
from pbd.memory.cuda_pool import CudaPools, pool_sizes
from pbd.memory.malloc import tune_malloc
from pbd.memory.segments import new_daemon_id, segment_namer
from pbd.metrics.collector import PbdCollector
from pbd.metrics.cpu import CpuMetrics
from pbd.metrics.server import MetricsServer
from pbd.modelconfig.model import ModelConfig
from pbd.repository.autocomplete import ConfigCompleter
from pbd.repository.manager import ModelRepository
from pbd.repository.upload import UploadLimits, Uploads
from pbd.settings import Settings
from pbd.stop_signals import stop_signals
from pbd.systemd.launcher import SystemdLauncher
from pbd.systemd.notify_loop import DaemonNotifier
from pbd.systemd.units import worker_unit
from pbd.tracing.provider import Tracing, build_tracing
from pbd.tracing.settings import parse_trace_config
from pbd.version.runtime import VersionRuntime
from pbd.worker.hub import WorkerHub
from pbd.worker.launcher import InstanceLauncher, ProcessLauncher

log = logging.getLogger("pbd")
SHUTDOWN_ANSWER_S = 5.0
# Once the drain is done, what the edges (the daemon's servers, or the front ends) give the
# calls they still hold (answers being written, streams left open) before closing them.
EDGE_STOP_GRACE_S = 1.0


class Daemon:
    def __init__(self, settings: Settings, tracing: Tracing | None = None) -> None:
        """``tracing``: what spans go through (tests pass one with an in-memory exporter);
        by default built from ``--trace-config`` and the OTEL_* environment."""
        self.settings = settings
        self.tracing = tracing or build_tracing(parse_trace_config(settings.trace_config))
        self.daemon_id = new_daemon_id()
        self.launcher: InstanceLauncher
        self.systemd: SystemdLauncher | None
        if settings.launcher == "systemd":
            # A path that outlives this process: running workers reconnect to the next daemon.
            self.hub = WorkerHub(settings.worker_socket or "/run/pbd/worker.sock")
            self.launcher = self.systemd = SystemdLauncher(settings)
        else:
            self.hub = WorkerHub(settings.worker_socket or f"@pbd-{self.daemon_id}")
            self.launcher = ProcessLauncher(settings.worker_scheduling)
            self.systemd = None
        self.notifier = DaemonNotifier(self.status_text)
        self.gpus = visible_gpus()
        self.custom_metrics = CustomMetrics()
        shm_name = segment_namer(settings.shm_prefix, self.daemon_id)
        count = settings.front_count()
        # Front-end processes serve the ports (``--frontends``); they follow the dataplane.
        # With them, the direct path: front ends send eligible requests straight to workers.
        self.routes = (
            Routes(self.daemon_id, settings, self.tracing)
            if count > 1 and settings.frontend_direct
            else None
        )
        self.fronts = (
            Fronts(count, settings, self.daemon_id, shm_name, self.routes, self._fronts_given_up)
            if count > 1
            else None
        )
        self.repository = ModelRepository(
            settings.model_repository.resolve(),
            self._make_runtime,
            settings.exit_timeout_secs,
            ConfigCompleter(settings, self.hub, gpus=self.gpus).load,
            Uploads(
                settings.model_upload_dir,
                UploadLimits(settings.model_upload_max_bytes, settings.model_upload_max_files),
            )
            if settings.allow_model_upload
            else None,
        )
        self.dataplane = DataPlane(
            self.repository,
            settings,
            ClientShmRegistry(
                enabled=settings.allow_client_shm,
                key_prefixes=settings.client_shm_key_prefix,
                shm_dir=str(settings.shm_dir),
                gpus=self.gpus,
                on_cuda_removed=self._cuda_region_removed,
            ),
            self.tracing,
            follower=self.fronts,
        )
        self.ensembles = Ensembles(self.repository, self.dataplane)
        self.cuda_pools = CudaPools(pool_sizes(settings.cuda_memory_pool_byte_size, self.gpus))
        self.bls = BlsService(self.dataplane, self.cuda_pools)
        # What every model version gives its instances; a model's BLS call re-enters at the
        # dataplane, so this is built last (versions are made only when models load).
        self.services = InstanceServices(
            settings=settings,
            launcher=self.launcher,
            hub=self.hub,
            shm_name=shm_name,
            gpus=self.gpus,
            custom_metrics=self.custom_metrics,
            tracing=self.tracing,
            bls=self.bls,
            routes=self.routes,
        )
        self.port = 0
        self._stop = asyncio.Event()
        self._forced = asyncio.Event()  # a second SIGTERM/SIGINT: stop without waiting
        self._stop_deadline = 0.0  # loop time by which loads and requests had their time
        self._startup_loads: asyncio.Future[list[str]] | None = None
        self._fronts_lost = False  # every front end was given up: exit 1
        # Startup loads that failed after READY=1 (--exit-on-error): the daemon exits with 1.
        self._late_failures: list[str] = []

    def _make_runtime(self, config: ModelConfig, version: int, model_dir: Path) -> VersionRuntime:
        """A version of a model the repository loads (never while the daemon is being built)."""
        if config.ensemble is not None:
            return EnsembleRuntime(
                config=config,
                version=version,
                model_dir=model_dir,
                services=self.services,
                ensembles=self.ensembles,
            )
        return VersionRuntime(
            config=config, version=version, model_dir=model_dir, services=self.services
        )

    def _cuda_region_removed(self, region: CudaRegion) -> None:
        """Workers that opened the region's handle close it (those that did not ignore it)."""
        for instance in self.dataplane.all_instances():
            instance.forget_cuda_region(region.generation)

    def request_stop(self) -> None:
        """SIGTERM/SIGINT: shut down in order, loads still running and requests in flight
        getting --exit-timeout-secs. A second one: now, without waiting for either (Ctrl-C
        twice)."""
        if not self._stop.is_set():
            loop = asyncio.get_running_loop()
            self._stop_deadline = loop.time() + self.settings.exit_timeout_secs
            self._stop.set()
            if self.fronts is not None:  # they may have the signal too: the daemon orders
                self.fronts.stopping()
        elif not self._forced.is_set():
            log.warning("asked again to stop: not waiting for loads or requests any longer")
            self._forced.set()

    def _fronts_given_up(self) -> None:
        """Nothing serves the ports any more: stop in order and exit 1, so that the service
        manager sees the failure and restarts the whole service (docs/frontends.md)."""
        log.error(
            "every front end was given up: nothing serves the gRPC and HTTP ports; shutting down"
        )
        self._fronts_lost = True
        self.request_stop()

    def _time_left(self) -> float:
        """What is left of --exit-timeout-secs since the stop was asked for (0 once forced)."""
        if self._forced.is_set():
            return 0.0
        return max(self._stop_deadline - asyncio.get_running_loop().time(), 0.0)

    async def _until_forced(self, task: asyncio.Future[Any], timeout: float) -> None:
        """Wait for ``task`` up to ``timeout`` seconds, or until a second stop signal."""
        forced = asyncio.ensure_future(self._forced.wait())
        await asyncio.wait({task, forced}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()

    def status_text(self) -> str:
        return status_line.status_text(self.repository)

    async def _stop_orphan_units(self) -> None:
        """Instance units left from an earlier daemon that no model of ours took back (a model
        removed from the repository, an autoscaled extra instance): stop them."""
        assert self.systemd is not None
        ours = {
            worker_unit(instance.id)
            for entry in self.repository.entries.values()
            for runtime in [*entry.versions.values(), *entry.loading.values()]
            for instance in runtime.supervisor.with_starting()
        }
        for unit in await self.systemd.running_units():
            if unit not in ours:
                log.info("stopping %s: no loaded model owns it", unit)
                await self.systemd.stop_unit(unit)

    async def _decide_detach(self) -> None:
        if self.systemd is not None and await self.systemd.own_job() == "restart":
            self.systemd.detaching = True
            log.info("restarting: instance units keep running for the next daemon")

    async def _load_startup_models(self) -> list[str]:
        names = self.repository.model_names()
        if self.settings.model_control_mode == "explicit":
            wanted = self.settings.load_model
            names = names if "*" in wanted else list(dict.fromkeys(wanted))
        failed: list[str] = []

        async def load(name: str) -> None:
            try:
                await self.repository.load(name)
            except PbdError:
                failed.append(name)  # the repository logged why
                return
            # The front ends learn each model as its load ends, as after a client's load: a
            # decoupled one must stream through them from then on, and one still loading
            # when --startup-wait-secs ends has no later announcement to wait for.
            await self.dataplane.announce_models()

        await asyncio.gather(*(load(n) for n in names))
        return failed

    def _still_loading(self) -> list[str]:
        return sorted(name for name, e in self.repository.entries.items() if e.loading)

    async def _load_unless_stopped(self) -> list[str] | None:
        """The startup models that failed to load, or None when a stop came first.

        Loads still running after --startup-wait-secs go on in the background: start-up
        reports ready without them (READY=1; STATUS= and the ready line name them), so one
        hung initialize() does not hold `systemctl start pbd` while the others serve."""
        loading = self._startup_loads = asyncio.ensure_future(self._load_startup_models())
        stopped = asyncio.ensure_future(self._stop.wait())
        wait = self.settings.startup_wait_secs
        await asyncio.wait(
            {loading, stopped}, timeout=wait or None, return_when=asyncio.FIRST_COMPLETED
        )
        stopped.cancel()
        if self._stop.is_set():
            await self._finish_startup_loads()
            return None
        if loading.done():
            return loading.result()
        log.warning(
            "still loading after %gs (--startup-wait-secs): %s; reporting ready, they serve "
            "once loaded",
            wait,
            ", ".join(self._still_loading()),
        )
        return []

    def _exit_if_failed(self, loading: asyncio.Future[list[str]]) -> None:
        """--exit-on-error for startup loads that ended after READY=1 (past
        --startup-wait-secs): a failure stops the daemon, exit status 1, as one before."""
        if loading.cancelled() or self._stop.is_set():
            return
        failed = loading.result()
        if failed:
            log.error("models failed to load: %s; exiting (--exit-on-error)", ", ".join(failed))
            self._late_failures.extend(failed)
            self.request_stop()

    async def _finish_startup_loads(self) -> None:
        """On shutdown: startup loads still running get what is left of --exit-timeout-secs
        to finish, and are cancelled after that (an instance cancelled in initialize() has
        its worker stopped)."""
        loading = self._startup_loads
        if loading is None or loading.done():
            return
        timeout = self._time_left()
        log.warning(
            "shutting down while models are still loading (%s): they get %gs to finish, "
            "then their instances are stopped",
            ", ".join(self._still_loading()),
            round(timeout, 1),
        )
        await self._until_forced(loading, timeout)
        if not loading.done():
            log.warning(
                "stopping the instances of %s: still loading",
                ", ".join(self._still_loading()),
            )
        loading.cancel()  # nothing to cancel when it finished in time
        with contextlib.suppress(asyncio.CancelledError):
            await loading

    async def _poll(self) -> None:
        """Poll mode's loop; it runs beside startup loads still going after
        --startup-wait-secs (``ModelRepository.poll`` leaves their models to them)."""
        while True:
            await asyncio.sleep(self.settings.repository_poll_secs)
            try:
                await self.repository.poll()
                await self.dataplane.announce_models()
            except Exception:  # noqa: BLE001 - a bad scan must not end polling
                log.exception("repository poll failed")

    async def _drain(self, timeout: float) -> None:
        """Every accepted request gets an answer before the listeners close: its result if it
        finishes within ``timeout``, else UNAVAILABLE (queued ones are not started; running
        ones end with their instance)."""
        draining = asyncio.ensure_future(self._drain_requests(timeout))
        await self._until_forced(draining, timeout)
        if draining.done() and draining.result():
            return
        draining.cancel()
        limit = self.settings.exit_timeout_secs
        after, why = (
            ("a second stop signal", "; a second stop signal came")
            if self._forced.is_set()
            else (f"--exit-timeout-secs ({limit:g}s)", f"; --exit-timeout-secs {limit:g}s passed")
        )
        refusal = unavailable(
            f"the server is shutting down: the request was still queued after {after} and "
            "was not executed"
        )
        refusal.failure = "OTHER"
        rejected = self.repository.reject_waiting(refusal)
        log.warning("shutdown: %d queued request(s) refused", rejected)
        # No grace: nothing new may start, and what still executes fails now.
        await self.repository.unload_all(
            grace=0.0,
            why=f" (the server is shutting down{why})",
        )
        # Let the handlers send those answers before the server stops.
        await self.dataplane.drain(SHUTDOWN_ANSWER_S)

    async def _drain_requests(self, timeout: float) -> bool:
        """Wait for the requests in flight: the daemon's, and those front ends sent straight to
        workers (``pbd.fronts.routes``). True when none is left within ``timeout``."""
        waits = [self.dataplane.drain(timeout)]
        if self.routes is not None:
            waits.append(self.routes.drain(timeout))
        return all(await asyncio.gather(*waits))

    async def run(self) -> int:
        """Start, load the models, serve until asked to stop, then stop: every part started is
        stopped in the reverse order, once (``contextlib.AsyncExitStack``), whether serving
        ended, start-up failed half-way or something raised. The exit code."""
        settings = self.settings
        if not settings.model_repository.is_dir():
            log.error("model repository '%s' is not a directory", settings.model_repository)
            return 2
        tune_malloc()
        async with contextlib.AsyncExitStack() as stack:
            if not await self._start(stack):
                return 2
            code = await self._serve()
        log.info("stopped")
        return code

    async def _start(self, stack: contextlib.AsyncExitStack) -> bool:
        """Start what serving needs, each part's stop pushed on ``stack`` as it starts; False
        (the reason logged) when a part cannot start."""
        settings = self.settings
        # Last out: what the batch processor still holds is exported (bounded by
        # OTEL_BSP_EXPORT_TIMEOUT).
        stack.push_async_callback(asyncio.to_thread, self.tracing.shutdown)
        stack.callback(self.notifier.close)
        if self.systemd is not None:
            try:
                await self.systemd.connect()
            except PbdError as exc:
                log.error("--launcher systemd: %s", exc.message)
                return False
            stack.callback(self.systemd.close)
        stack.callback(self.cuda_pools.close)
        stack.callback(self.dataplane.shm.close)
        await self.hub.start()
        stack.push_async_callback(self.hub.close)
        stack.push_async_callback(self._reset_failed_units)
        if self.repository.uploads is not None:
            stack.callback(self.repository.uploads.close)
        stack.push_async_callback(self.repository.unload_all)
        stack.push_async_callback(self.bls.close)
        metrics_sockets: list[socket.socket] = []
        try:
            if settings.allow_metrics:
                # Bound before the edges, so that every public socket is bound before a front
                # end starts: a port taken ends the start with no child to stop.
                metrics_sockets = bind_tcp(
                    settings.metrics_address, settings.metrics_port, "metrics server"
                )
                stack.callback(_close_all, metrics_sockets)
            await self._serve_edges(stack)
        except (OSError, ValueError) as exc:
            log.error("%s", exc)
            return False
        if settings.allow_metrics:
            cpu = [CpuMetrics()] if settings.allow_cpu_metrics else []
            metrics = MetricsServer(
                [PbdCollector(self.dataplane), *cpu, self.custom_metrics],
                before=self.dataplane.collect_stats,
            )
            await metrics.start(metrics_sockets)
            stack.push_async_callback(metrics.stop)
            log.info(
                "Metrics server listening on %s:%d",
                settings.metrics_address,
                tcp_port(metrics_sockets),
            )
        return True

    async def _serve_edges(self, stack: contextlib.AsyncExitStack) -> None:
        """Listen on the public ports: here, or (``--frontends`` over 1) in front-end
        processes, on sockets bound here. OSError or ValueError when that cannot be done."""
        settings = self.settings
        fronts = self.fronts
        http_port = 0
        if fronts is None:
            if settings.allow_grpc:
                server = build_server(self.dataplane, settings)
                self.port = await server.start()
                stack.push_async_callback(server.stop, EDGE_STOP_GRACE_S)
            if settings.allow_http:
                http = HttpFrontend(self.dataplane, settings)
                await http.start()
                stack.push_async_callback(http.stop)
                http_port = http.port
        else:
            tls_context(settings)  # a bad certificate, key or restriction: refused here, once
            grpc_restrictions(settings.grpc_restricted_protocol)
            HttpRestrictions.parse(settings.http_restricted_api)
            grpc = grpc_sockets(settings) if settings.allow_grpc else []
            stack.callback(_close_all, grpc)
            http_socks = http_sockets(settings) if settings.allow_http else []
            stack.callback(_close_all, http_socks)
            self.port, http_port = tcp_port(grpc), tcp_port(http_socks)
            await fronts.start(self.dataplane, grpc, http_socks)
            stack.push_async_callback(fronts.close)
        by = f" by {fronts.count} front-end processes" if fronts is not None else ""
        if settings.allow_grpc:
            where = (
                settings.grpc_address
                if settings.grpc_address.startswith("unix:")
                else f"{settings.grpc_address}:{self.port}"
            )
            tls = " (TLS)" if settings.grpc_use_ssl else ""
            log.info("gRPC server listening on %s%s%s", where, tls, by)
        if settings.allow_http:
            log.info("HTTP server listening on %s:%d%s", settings.http_address, http_port, by)

    async def _serve(self) -> int:
        """Load the startup models, serve until asked to stop, then let the requests in flight
        finish (``_drain``); the exit code."""
        settings = self.settings
        self.notifier.start()  # STATUS= says what is loading meanwhile
        # The startup loads begin before the front ends are linked (they take a second to
        # start): a client the first front end serves sees the models in the index, loading.
        failed = await self._load_unless_stopped()
        if failed is not None and self.fronts is not None and not await self.fronts.connected():
            log.warning("not every front end came up within 30s; serving with those that did")
        # Every front end knows the models before ServerReady says so.
        await self.dataplane.announce_models()
        self.dataplane.started = True
        # What start-up made lives as long as the daemon: out of the collector's way, so its
        # full collections under load walk only what serving allocates.
        gc.collect()
        gc.freeze()
        code = 0
        poller: asyncio.Task[None] | None = None
        if failed is None:
            log.info("shutting down")
        elif failed and settings.exit_on_error:
            log.error("models failed to load: %s; exiting (--exit-on-error)", ", ".join(failed))
            code = 1
        else:
            if settings.model_control_mode == "poll":
                poller = asyncio.create_task(self._poll())
            log.log(*status_line.ready_line(self.repository))
            if self.systemd is not None:
                await self._stop_orphan_units()
            self.notifier.ready()
            if settings.exit_on_error and self._startup_loads is not None:
                # Loads that went on after --startup-wait-secs (maybe done by now).
                self._startup_loads.add_done_callback(self._exit_if_failed)
            await self._stop.wait()
            log.info("shutting down")
            await self._finish_startup_loads()
            if self._late_failures:
                code = 1
        await self._decide_detach()
        await self.notifier.stopping(
            "restarting; instances keep running"
            if self.launcher.detaching
            else "draining requests and stopping instances"
        )
        if poller is not None:
            poller.cancel()
        timeout = self._time_left() if self._stop.is_set() else settings.exit_timeout_secs
        if self.fronts is not None:
            # As the daemon's own server: the front ends keep accepting while the daemon
            # drains (it refuses what comes, UNAVAILABLE) and stop once it is done.
            self.fronts.stopping()
        await self._drain(timeout)
        if self.fronts is not None:
            await self.fronts.stop(EDGE_STOP_GRACE_S)
        return 1 if self._fronts_lost else code

    async def _reset_failed_units(self) -> None:
        """Forget the failed instance units systemd remembers, unless they keep running for the
        next daemon."""
        if self.systemd is not None and not self.launcher.detaching:
            await self.systemd.reset_failed()


def _close_all(sockets: list[socket.socket]) -> None:
    """The daemon's copies of the public sockets (front ends hold their own)."""
    for sock in sockets:
        sock.close()


async def serve(settings: Settings) -> int:
    daemon = Daemon(settings)
    with stop_signals(daemon.request_stop):  # twice: stop now
        return await daemon.run()
