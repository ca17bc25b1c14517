"""A front-end process (``pbd serve --frontends N``, N > 1): ``python -m pbd.fronts.front``.

It serves the public gRPC and HTTP ports on listening sockets the daemon bound and passed
down, beside the other front ends (the kernel hands each new connection to one of them). It
speaks the protocols itself: TLS, HTTP/2 and HPACK, gRPC framing, HTTP/1.1, the conversion of
requests and the encoding of answers. Inference (ModelInfer, each request of ModelStreamInfer,
HTTP infer, generate and the OpenAI API) goes to a worker on the direct path, or to the
daemon over its link as descriptors, the bytes through shared memory
(``pbd.fronts.remote_plane``); every other RPC is passed to the daemon whole, which answers it
from the state that must be one (``RemotePlane.call``, ``pbd.fronts.http_proxy``), and so are
the generate and OpenAI requests of models off the direct path (``pbd.http.elsewhere``).

It stops when the daemon says so (``Stop``: stop accepting, let what is in flight finish
within the grace, exit), or when the daemon's link ends (the daemon is gone: nothing could be
answered any more). While the daemon drains it keeps accepting, as the daemon serving alone
does: the daemon refuses new requests (UNAVAILABLE) and sends ``Stop`` once what it accepted
is answered. A SIGTERM that reaches the daemon too (systemd's stop, Ctrl-C: the whole group)
leaves that order to the daemon; one sent to this front end alone stops it by itself.

Its arena's segments are memfds (``pbd_wire.shm``): whichever way it ends, they go with the
last process that maps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from pbd._proto import front_pb2 as fpb
from pbd.fronts.http_proxy import HttpProxy
from pbd.fronts.inflight import InflightTable
from pbd.fronts.loads import DEFER_S, Loads
from pbd.fronts.remote_plane import RemotePlane
from pbd.grpc.calls import Calls
from pbd.grpc.restricted import grpc_restrictions
from pbd.grpc.server import MAX_MESSAGE_BYTES, GrpcServer, tls_context
from pbd.grpc.servicer import InferenceRpcs, methods
from pbd.http.elsewhere import Elsewhere
from pbd.http.server import HttpFrontend
from pbd.listeners import Sharing
from pbd.logsettings import log_config
from pbd.memory.malloc import tune_malloc
from pbd.settings import Settings
from pbd.stop_signals import stop_signals
from pbd_wire.framing import encode_frame, socket_address
from pbd_wire.shm import Arena, SegmentMap
from pbd_worker.logconfig import LogConfig, apply

# How long a signalled front end waits to hear that its daemon is stopping too (a signal to
# the whole group reaches both) before it stops by itself.
ORDER_WAIT_S = 2.0
log = logging.getLogger("pbd.fronts")
SPEC_ENV = "PBD_FRONT_SPEC"
PUBLISH_S = 0.5  # how often the connection count is published when no accept did
SWEEP_S = 5.0  # how often mappings of segments that are gone are let go
SWEEP_EVERY = round(SWEEP_S / PUBLISH_S)


@dataclass(frozen=True)
class FrontSpec:
    """What the daemon tells a front end it starts (in the environment, as JSON)."""

    index: int
    token: str
    link: str  # the daemon's socket for front ends
    arena_base: str  # this front end's segments are named <arena_base>-d<n>
    segments_prefix: str  # the daemon's segments (workers' outputs) start with this
    http_socket: str  # the daemon's own HTTP server, for what is passed on
    grpc_fds: list[int]
    http_fds: list[int]
    loads_fd: int  # the front ends' connection counts (pbd.fronts.loads)
    inflight_fd: int  # what they have in flight at scaled instances (pbd.fronts.inflight)
    fronts: int  # how many front ends share the sockets
    settings: str  # Settings.to_json()

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> FrontSpec:
        return cls(**json.loads(os.environ[SPEC_ENV]))


async def serve(spec: FrontSpec, settings: Settings) -> int:
    loop = asyncio.get_running_loop()
    shm_dir = str(settings.shm_dir)
    arena = Arena(
        f"{spec.arena_base}-d", settings.shm_default_byte_size, settings.shm_growth_byte_size
    )
    plane = RemotePlane(arena, SegmentMap(shm_dir, allowed_prefix=spec.segments_prefix))
    plane.on_log_levels = _apply_log_levels
    if settings.frontend_direct:
        direct = plane.direct_path(spec.index, shm_dir, direct_bytes(settings, spec.fronts))
        direct.inflight = InflightTable(spec.inflight_fd, spec.fronts)
        direct.first_response_histogram = settings.metrics_histogram_latencies
    loads = Loads(spec.loads_fd, spec.fronts, spec.index)
    try:
        link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        link.setblocking(False)
        try:
            await loop.sock_connect(link, socket_address(spec.link))
        except OSError as exc:
            link.close()
            log.error("front end %d: the daemon is gone (%s); exiting", spec.index, exc.strerror)
            return 1
        await loop.create_unix_connection(lambda: plane, sock=link)
        hello = fpb.FrontToDaemon(
            hello=fpb.Hello(token=spec.token, index=spec.index, pid=os.getpid())
        )
        assert plane.transport is not None
        plane.transport.write(encode_frame(hello.SerializeToString()))
        await asyncio.wait({asyncio.ensure_future(plane.ready()), plane.ended},
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        if plane.ended.done():
            log.error("front end %d: the daemon refused or dropped its link", spec.index)
            return 1
        buffer = settings.grpc_stream_buffer_bytes
        calls = Calls(
            methods(
                InferenceRpcs(plane, buffer),
                grpc_restrictions(settings.grpc_restricted_protocol),
                proxy=plane.call,
            ),
            MAX_MESSAGE_BYTES,
            settings.grpc_max_concurrent_rpcs or None,
            buffer,
        )
        try:
            tls = tls_context(settings)
        except OSError as exc:  # the daemon read them at its start; they changed since
            log.error("front end %d cannot serve: %s", spec.index, exc)
            return 1
        grpc_server = GrpcServer(calls, settings, tls)
        http: HttpFrontend | None = None

        def held() -> int:
            return len(grpc_server.connections) + (http.connection_count() if http else 0)

        loads.publish(0)
        sharing = Sharing(
            mine=lambda starting: loads.may_take(held() + starting),
            defer_s=DEFER_S,
            changed=lambda starting: loads.publish(held() + starting),
            others=loads.others,
        )
        await grpc_server.start([socket.socket(fileno=fd) for fd in spec.grpc_fds], sharing)
        proxy = HttpProxy(spec.http_socket)
        if spec.http_fds:
            http = HttpFrontend.front(plane, settings, Elsewhere(plane.runs_here, proxy))
            await http.start([socket.socket(fileno=fd) for fd in spec.http_fds], sharing)
        with stop_signals(functools.partial(_on_signal, plane, settings)):
            log.debug("front end %d (pid %d) serving", spec.index, os.getpid())
            sweeping = asyncio.create_task(_sweep(plane, lambda: loads.publish(held())))
            beating = asyncio.create_task(_heartbeats(plane, settings.worker_heartbeat_ms))
            await plane.ended
            sweeping.cancel()
            beating.cancel()
            grace = plane.stop_grace if plane.stop_grace is not None else 0.0
            await grpc_server.stop(grace)
            if http is not None:
                await http.stop()
            await proxy.close()
            return 0
    finally:
        plane.close()
        arena.close()
        plane.segments.close()
        loads.close()


def direct_bytes(settings: Settings, fronts: int) -> int:
    """Input bytes of direct requests one front end may hold: an eighth of
    --max-queued-bytes shared by the front ends (0: unbounded, as the limit). What a front
    end cannot take goes through the daemon, whose budget holds: the service holds at most
    --max-queued-bytes plus that eighth."""
    return max(settings.max_queued_bytes // (8 * fronts), 1) if settings.max_queued_bytes else 0


async def _sweep(plane: RemotePlane, publish: Callable[[], None]) -> None:
    """Mappings of segments that are gone let go every ``SWEEP_S``; this front end's
    connection count published every ``PUBLISH_S`` (connections that closed leave it)."""
    for tick in itertools.count(1):
        await asyncio.sleep(PUBLISH_S)
        publish()
        if tick % SWEEP_EVERY == 0:
            plane.sweep()


async def _heartbeats(plane: RemotePlane, interval_ms: int) -> None:
    """The first once this front end serves its sockets (it ends its start), then one every
    ``interval_ms``: the daemon kills a front end silent for --worker-heartbeat-timeout-secs
    (stopped, or its loop stuck) and starts another (``pbd.fronts.supervisor``)."""
    while True:
        plane.heartbeat()
        await asyncio.sleep(max(interval_ms, 10) / 1000.0)


def _on_signal(plane: RemotePlane, settings: Settings) -> None:
    """SIGTERM/SIGINT. Sent to the whole group (systemd's stop, Ctrl-C), it reached the daemon
    too, which orders the shutdown: this front end keeps serving while the daemon drains and
    stops on its ``Stop``. Sent to this front end alone (the daemon says nothing of stopping
    within ``ORDER_WAIT_S``), it stops by itself and the daemon starts another."""
    if not plane.daemon_stopping and not plane.ended.done():
        asyncio.get_running_loop().call_later(ORDER_WAIT_S, _stop_alone, plane, settings)


def _stop_alone(plane: RemotePlane, settings: Settings) -> None:
    """Stop accepting; the calls in flight get --exit-timeout-secs to finish."""
    if plane.daemon_stopping or plane.ended.done():
        return
    plane.stop_grace = settings.exit_timeout_secs
    plane.ended.set_result(None)


def _apply_log_levels(levels: fpb.LogLevels) -> None:
    apply(
        LogConfig(
            info=levels.info,
            warning=levels.warning,
            error=levels.error,
            verbose=levels.verbose,
            format=levels.format,
        )
    )


def main() -> int:
    spec = FrontSpec.from_env()
    settings = Settings.from_json(spec.settings)
    apply(log_config(settings))
    tune_malloc()  # as the daemon: large requests reuse the heap (pbd.memory.malloc)
    return asyncio.run(serve(spec, settings))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
