"""The front-end processes of ``pbd serve --frontends N`` (N > 1), from the daemon's side.

The daemon binds the public sockets and keeps them; each front end gets them (inherited file
descriptors) and accepts connections on them, so a front end that dies loses only its own
connections: the sockets stay bound, the kernel hands new connections to the others, and the
replacement accepts on the same sockets. A front end is started like an instance and
supervised by the instances' rules (``pbd.version.supervisor``), the gunicorn arbiter's verbs:

- *reap*: one that exits while the daemon runs is logged, its requests cancelled in the daemon
  (``FrontLink`` ends), its arena removed, and it is started again, backing off as an
  instance does (reset once it ran ``STABLE_UPTIME_S``);
- *murder*: one that does not serve within --worker-start-timeout-secs of its start, or then
  sends nothing for --worker-heartbeat-timeout-secs (stopped, its loop stuck), is killed, and
  reaped as any dead one;
- *give up*: one whose start fails ``MAX_RESTART_FAILURES`` times in a row (it exits or is
  killed before it serves) is not started again; when every front end is given up nothing
  serves the ports, and the daemon stops with an error (``on_all_given_up``). A front end
  that dies after it served is restarted however often it does (a client may be what kills
  it: that must not stop the service).

Three private sockets serve them: the link every front end connects to (abstract, checked by
uid and a one-time token per start), and the daemon's own HTTP server in a private directory
(``private_directory``) for the HTTP requests they pass on. The gRPC RPCs they pass on run over
the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pbd._proto import front_pb2 as fpb
from pbd.dataplane import DataPlane
from pbd.fronts.front import SPEC_ENV, FrontSpec
from pbd.fronts.front_link import FrontHub, FrontLink
from pbd.fronts.inflight import InflightTable
from pbd.fronts.inflight import create_memfd as create_inflight_memfd
from pbd.fronts.loads import Loads, create_memfd
from pbd.fronts.routes import Routes
from pbd.grpc.restricted import grpc_restrictions
from pbd.grpc.servicer import InferenceServicer, methods
from pbd.http.server import HttpFrontend
from pbd.memory import lent
from pbd.memory.client_shm import SystemRegion
from pbd.settings import Settings
from pbd.version.runtime import VersionRuntime
from pbd.version.supervisor import FIRST_BACKOFF_S, MAX_RESTART_FAILURES, STABLE_UPTIME_S
from pbd_wire.framing import encode_frame, socket_address

log = logging.getLogger("pbd.fronts")
KILL_AFTER_S = 5.0
MURDER_EVERY_S = 1.0  # how often the supervisor looks for silent front ends


@dataclass
class FrontStart:
    """One start of a front end, as its supervision sees it."""

    process: asyncio.subprocess.Process
    began: float  # loop time
    link: FrontLink | None = None  # once its Hello was checked

    @property
    def served(self) -> bool:
        """It served its sockets (its first Heartbeat came): its start succeeded."""
        return self.link is not None and self.link.serving

    def silent(self, now: float, settings: Settings) -> str:
        """Why it is to be killed (no sign of life in time); "" while it is well."""
        if self.link is None or not self.link.serving:
            limit = settings.worker_start_timeout_secs
            if now - self.began > limit:
                return f"did not serve within {limit:g}s of its start"
            return ""
        limit = settings.worker_heartbeat_timeout_secs
        if now - self.link.last_seen > limit:
            return f"sent no heartbeat for {limit:g}s"
        return ""


class Fronts:
    def __init__(
        self,
        count: int,
        settings: Settings,
        daemon_id: str,
        segment_name: Callable[[], str],
        routes: Routes | None = None,
        on_all_given_up: Callable[[], None] = lambda: None,
    ) -> None:
        self.count = count
        # Every front end was given up: nothing serves the ports any more.
        self.on_all_given_up = on_all_given_up
        self.given_up: dict[int, str] = {}  # index -> why
        self.routes = routes  # the direct path (``pbd.fronts.routes``); None: off
        self.settings = settings
        self.daemon_id = daemon_id
        self.segment_name = segment_name  # a fresh name base for each start's arena
        self.segments_prefix = segment_name().rsplit("-", 1)[0] + "-"
        self.tokens: dict[int, tuple[str, str]] = {}
        self.hub: FrontHub | None = None  # from start(), with the dataplane
        self.starts: dict[int, FrontStart] = {}  # index -> its current start
        self._address = f"@pbd-{daemon_id}-fronts"
        self._link_server: asyncio.AbstractServer | None = None
        self._http: HttpFrontend | None = None
        self._private = ""
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._fds: tuple[list[socket.socket], list[socket.socket]] = ([], [])
        self._loads_fd = -1  # the front ends' connection counts (pbd.fronts.loads)
        self._loads: Loads | None = None
        # What they have in flight at each scaled instance (pbd.fronts.inflight)
        self._inflight_fd = -1
        self._inflight: InflightTable | None = None

    async def start(
        self, dataplane: DataPlane, grpc: list[socket.socket], http: list[socket.socket]
    ) -> None:
        """Serve the private sockets and start every front end on ``grpc`` and ``http``."""
        loop = asyncio.get_running_loop()
        self._fds = (grpc, http)
        self._loads_fd = create_memfd(self.count)
        self._loads = Loads(self._loads_fd, self.count, 0)  # the daemon marks the gone
        self._inflight_fd = create_inflight_memfd(self.count)
        self._inflight = InflightTable(self._inflight_fd, self.count)
        restrictions = grpc_restrictions(self.settings.grpc_restricted_protocol)
        hub = self.hub = FrontHub(
            dataplane,
            methods(InferenceServicer(dataplane), restrictions),
            str(self.settings.shm_dir),
            self.tokens,
        )
        hub.decoupled = dataplane.decoupled_models()
        hub.on_attach = self._linked
        if self.routes is not None:
            self.routes.attach(hub, dataplane.repository, self._inflight)
        link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        link.bind(socket_address(self._address))
        self._link_server = await loop.create_unix_server(lambda: FrontLink(hub), sock=link)
        self._private = private_directory(self.settings.shm_dir)
        own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        own.bind(os.path.join(self._private, "http.sock"))
        own.listen(128)
        own.setblocking(False)
        self._http = HttpFrontend(dataplane, self.settings)
        await self._http.start([own])
        for index in range(self.count):
            self._watchers.append(asyncio.create_task(self._keep(index), name=f"front {index}"))
        self._watchers.append(asyncio.create_task(self._murder(), name="front heartbeats"))

    async def _keep(self, index: int) -> None:
        """Run front end ``index`` for as long as the daemon serves, replacing it when it
        exits; give it up when its start fails ``MAX_RESTART_FAILURES`` times in a row."""
        loop = asyncio.get_running_loop()
        backoff = FIRST_BACKOFF_S
        failures = 0  # starts in a row that ended before the front end served
        while not self._stopping:
            base = self.segment_name()
            start = await self._spawn(index, base)
            code = await start.process.wait()
            if self._loads is not None:
                self._loads.mark_gone(index)  # until its replacement counts its own
            self._forget(index, base)
            if self._stopping:
                return
            if loop.time() - start.began > STABLE_UPTIME_S:
                backoff = FIRST_BACKOFF_S
            failures = 0 if start.served else failures + 1
            what = _exit_text(code)
            if failures >= MAX_RESTART_FAILURES:
                self._give_up(index, f"its last {failures} starts failed (the last {what})")
                return
            log.error(
                "front end %d (pid %d) %s%s; starting another in %gs",
                index,
                start.process.pid,
                what,
                "; its connections are gone" if start.served else " before it served",
                backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.settings.restart_backoff_max_secs)

    def _give_up(self, index: int, reason: str) -> None:
        self.given_up[index] = reason
        log.error("giving up on front end %d: %s", index, reason)
        if len(self.given_up) == self.count:
            self.on_all_given_up()

    async def _murder(self) -> None:
        """Kill, once a second, the front ends that show no sign of life in time (the reaper
        then starts another)."""
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await asyncio.sleep(MURDER_EVERY_S)
            now = loop.time()
            for index, start in list(self.starts.items()):
                why = start.silent(now, self.settings)
                if why and start.process.returncode is None and not self._stopping:
                    log.error("front end %d (pid %d) %s; killing it", index, start.process.pid, why)
                    with contextlib.suppress(ProcessLookupError):
                        start.process.send_signal(signal.SIGKILL)

    def _linked(self, link: FrontLink) -> None:
        start = self.starts.get(link.index)
        if start is not None and start.process.pid == link.pid:
            start.link = link

    async def _spawn(self, index: int, base: str) -> FrontStart:
        token = secrets.token_hex(16)
        self.tokens[index] = (token, base)
        grpc, http = self._fds
        assert self._http is not None
        spec = FrontSpec(
            index=index,
            token=token,
            link=self._address,
            arena_base=base,
            segments_prefix=self.segments_prefix,
            http_socket=os.path.join(self._private, "http.sock"),
            grpc_fds=[s.fileno() for s in grpc],
            http_fds=[s.fileno() for s in http],
            loads_fd=self._loads_fd,
            inflight_fd=self._inflight_fd,
            fronts=self.count,
            settings=self.settings.to_json(),
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pbd.fronts.front",
            env={**os.environ, SPEC_ENV: spec.to_env()},
            pass_fds=[*spec.grpc_fds, *spec.http_fds, spec.loads_fd, spec.inflight_fd],
            stdin=asyncio.subprocess.DEVNULL,
        )
        start = self.starts[index] = FrontStart(process, asyncio.get_running_loop().time())
        log.info("front end %d started (pid %d)", index, process.pid)
        return start

    def _forget(self, index: int, base: str) -> None:
        """A front end is gone: the daemon's mappings of its arena with it (its memory goes
        with the last process that maps it)."""
        lent.forget(base)

    async def connected(self, timeout: float = 30.0) -> bool:
        """Until every front end is up and linked (False after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self.hub is not None and len(self.hub.links) < self.count - len(self.given_up):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def models_changed(self, decoupled: list[str]) -> None:
        """Every front end learns the decoupled models; returns once each has."""
        if self.hub is not None:
            await self.hub.sync(decoupled)

    async def regions_changed(self, added: list[SystemRegion], removed: list[str]) -> None:
        """Every front end learns the change; returns once each has."""
        if self.hub is not None:
            await self.hub.sync_regions(added, removed)

    async def regions_let_go(self) -> None:
        if self.hub is not None:
            await self.hub.regions_let_go()

    async def direct_changed(self) -> None:
        if self.hub is not None:
            await self.hub.sync()

    async def collect_stats(self) -> None:
        if self.routes is not None:
            await self.routes.collect_stats()

    def direct_inflight(self) -> int:
        return self.routes.inflight() if self.routes is not None else 0

    def direct_pending(self, runtime: VersionRuntime) -> int:
        return self.routes.pending(runtime) if self.routes is not None else 0

    def log_settings_changed(self) -> None:
        s = self.settings
        levels = fpb.LogLevels(
            verbose=s.log_verbose,
            info=s.log_info,
            warning=s.log_warning,
            error=s.log_error,
            format=s.log_format,
        )
        if self.hub is not None:
            frame = fpb.DaemonToFront(log_levels=levels).SerializeToString()
            self.hub.broadcast(encode_frame(frame))

    def pids(self) -> list[int]:
        return [s.process.pid for s in self.starts.values() if s.process.returncode is None]

    def stopping(self) -> None:
        """The daemon is shutting down: the front ends keep serving while it drains (it
        refuses new requests, as it does serving alone) and stop on its ``stop`` only, not on
        a signal of their own; ``stop`` follows once what the daemon accepted is answered."""
        if self.hub is not None and not self.hub.stopping:
            self.hub.stopping = True
            self.hub.announce()

    async def stop(self, grace: float) -> None:
        """Each front end stops accepting, lets its calls finish within ``grace`` (their
        answers come from the daemon, which drains meanwhile) and exits; a front end still
        there ``KILL_AFTER_S`` later is killed."""
        self._stopping = True
        stop = fpb.DaemonToFront(stop=fpb.Stop(grace_s=grace))
        if self.hub is not None:
            self.hub.broadcast(encode_frame(stop.SerializeToString()))
        running = [s.process for s in self.starts.values() if s.process.returncode is None]
        waits = [asyncio.ensure_future(p.wait()) for p in running]
        if waits:
            _done, late = await asyncio.wait(waits, timeout=grace + KILL_AFTER_S)
            for process in running:
                if process.returncode is None:
                    log.warning("front end (pid %d) did not stop; killing it", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(signal.SIGKILL)
            if late:
                await asyncio.wait(late, timeout=KILL_AFTER_S)
        for watcher in self._watchers:
            watcher.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._watchers, return_exceptions=True)

    async def close(self) -> None:
        """After ``stop``: the private sockets and whatever the front ends left."""
        if self._link_server is not None:
            self._link_server.close()
        for link in list(self.hub.links.values()) if self.hub is not None else []:
            link.close()
        if self._http is not None:
            await self._http.stop()
        if self._private:
            shutil.rmtree(self._private, ignore_errors=True)
        for _token, base in self.tokens.values():
            self._forget(-1, base)
        if self._loads is not None:
            self._loads.close()
            self._loads = None
            os.close(self._loads_fd)
        if self._inflight is not None:
            if self.routes is not None:
                self.routes.slots = None
            self._inflight.close()
            self._inflight = None
            os.close(self._inflight_fd)


def private_directory(shm_dir: Path) -> str:
    """A new mode-0700 directory for the daemon's private HTTP socket: under systemd's
    ``$RUNTIME_DIRECTORY``, else the temp directory, else ``shm_dir``. A read-only root
    filesystem (a Kubernetes pod's ``readOnlyRootFilesystem``) leaves no temp directory, while
    a container's /dev/shm is a tmpfs everyone may write; a socket takes none of its space."""
    runtime = os.environ.get("RUNTIME_DIRECTORY")
    try:
        return tempfile.mkdtemp(prefix="pbd-fronts-", dir=runtime)
    except OSError as error:
        if runtime:
            raise
        log.info("no usable temp directory (%s): the private HTTP socket is in %s", error, shm_dir)
        return tempfile.mkdtemp(prefix="pbd-fronts-", dir=shm_dir)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"
