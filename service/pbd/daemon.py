"""The daemon's life: start, load models, serve, and shut down in order.

Shutdown (SIGTERM/SIGINT): stop accepting requests, let those in flight finish (up to
``exit_timeout_secs``; after that the queued ones are refused with UNAVAILABLE and the running
ones end with their instances, so every accepted request gets an answer), finalize models and
stop workers, remove every shared-memory segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from pbd.dataplane import DataPlane
from pbd.errors import PbdError, unavailable
from pbd.gpus import visible_gpus
from pbd.grpc.server import build_server, secure_socket
from pbd.http.server import HttpFrontend
from pbd.instances.hub import WorkerHub
from pbd.instances.launcher import ProcessLauncher
from pbd.instances.supervisor import VersionRuntime
from pbd.memory.client_shm import SystemShmRegistry
from pbd.memory.malloc import tune_malloc
from pbd.memory.segments import new_daemon_id, remove_segments, segment_namer
from pbd.repository.config import ModelConfig
from pbd.repository.manager import ModelRepository
from pbd.settings import Settings

log = logging.getLogger("pbd")
SHUTDOWN_ANSWER_S = 5.0


class Daemon:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.daemon_id = new_daemon_id()
        self.hub = WorkerHub(settings.worker_socket or f"@pbd-{self.daemon_id}")
        self.launcher = ProcessLauncher()
        self.gpus = visible_gpus()
        shm_name = segment_namer(settings.shm_prefix, self.daemon_id)

        def make_runtime(config: ModelConfig, version: int, model_dir: Path) -> VersionRuntime:
            return VersionRuntime(
                config=config,
                version=version,
                model_dir=model_dir,
                settings=settings,
                launcher=self.launcher,
                hub=self.hub,
                shm_name=shm_name,
                gpus=self.gpus,
            )

        self.repository = ModelRepository(
            settings.model_repository.resolve(), make_runtime, settings.exit_timeout_secs
        )
        self.dataplane = DataPlane(
            self.repository,
            settings,
            SystemShmRegistry(
                enabled=settings.allow_client_shm, key_prefixes=settings.client_shm_key_prefix
            ),
        )
        self.port = 0
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def _load_startup_models(self) -> list[str]:
        names = self.repository.model_names()
        if self.settings.model_control_mode == "explicit":
            wanted = self.settings.load_model
            names = names if "*" in wanted else list(dict.fromkeys(wanted))
        failed: list[str] = []

        async def load(name: str) -> None:
            try:
                await self.repository.load(name)
            except PbdError as exc:
                failed.append(name)
                log.error("%s", exc.message)

        await asyncio.gather(*(load(n) for n in names))
        return failed

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_secs)
            try:
                await self.repository.poll()
            except Exception:  # noqa: BLE001 - a bad scan must not end polling
                log.exception("repository poll failed")

    async def _drain(self, timeout: float) -> None:
        """Every accepted request gets an answer before the listeners close: its result if it
        finishes within ``timeout``, else UNAVAILABLE (queued ones are not started; running
        ones end with their instance)."""
        if await self.dataplane.drain(timeout):
            return
        rejected = self.repository.reject_waiting(
            unavailable(
                "the server is shutting down: the request was still queued after "
                f"--exit-timeout-secs ({timeout:g}s) and was not executed"
            )
        )
        log.warning("shutdown: %d queued request(s) refused after %gs", rejected, timeout)
        await self.repository.unload_all(grace=1.0)
        # Let the handlers send those answers before the server stops.
        await self.dataplane.drain(SHUTDOWN_ANSWER_S)

    async def run(self) -> int:
        settings = self.settings
        if not settings.model_repository.is_dir():
            log.error("model repository '%s' is not a directory", settings.model_repository)
            return 2
        tune_malloc()
        remove_segments(settings.shm_prefix, shm_dir=str(settings.shm_dir))
        await self.hub.start()
        try:
            server, self.port = build_server(self.dataplane, settings)
        except (OSError, ValueError) as exc:
            log.error("%s", exc)
            await self.hub.close()
            return 2
        await server.start()
        secure_socket(settings)
        where = (
            settings.grpc_address
            if settings.grpc_address.startswith("unix:")
            else f"{settings.grpc_address}:{self.port}"
        )
        log.info("gRPC server listening on %s%s", where, " (TLS)" if settings.grpc_use_ssl else "")
        http: HttpFrontend | None = None
        if settings.allow_http:
            http = HttpFrontend(self.dataplane, settings)
            await http.start()
            log.info("HTTP server listening on %s:%d", settings.http_address, http.port)
        failed = await self._load_startup_models()
        self.dataplane.started = True
        code = 0
        poller: asyncio.Task[None] | None = None
        if failed and settings.exit_on_error:
            log.error("models failed to load: %s; exiting (--exit-on-error)", ", ".join(failed))
            code = 1
        else:
            if settings.model_control_mode == "poll":
                poller = asyncio.create_task(self._poll())
            log.info(
                "pbd ready: %d model(s) loaded",
                sum(1 for e in self.repository.index() if e.state == "READY"),
            )
            await self._stop.wait()
            log.info("shutting down")
        if poller is not None:
            poller.cancel()
        await self._drain(settings.exit_timeout_secs)
        await server.stop(grace=1.0)
        if http is not None:
            await http.stop()
        await self.repository.unload_all()
        await self.hub.close()
        remove_segments(
            settings.shm_prefix, daemon_id=self.daemon_id, shm_dir=str(settings.shm_dir)
        )
        log.info("stopped")
        return code


async def serve(settings: Settings) -> int:
    daemon = Daemon(settings)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, daemon.request_stop)
    try:
        return await daemon.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)
            # Shutdown is done; a repeated SIGTERM must not turn a clean exit into a kill.
            signal.signal(signum, signal.SIG_IGN)
