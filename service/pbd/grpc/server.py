"""pbd's gRPC server: KServe v2 and health RPCs over its own HTTP/2 (``pbd.h2``) on the
daemon's event loop, plaintext or TLS, on TCP or a Unix socket.

Why not grpc.aio's server: on this path it costs about 400 us of CPU per small call (its
completion-queue poller thread, the hand-over to the event loop, the Cython call objects),
against about 60 us for the same echo over ``pbd.h2`` (bench/README.md, "The gRPC front
end"). grpcio stays the client side of everything (tritonclient, the tests, the benchmark).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
import time

from pbd.control_plane import ControlPlane
from pbd.grpc.calls import Calls
from pbd.grpc.restricted import grpc_restrictions
from pbd.grpc.servicer import InferenceServicer, methods
from pbd.h2.connection import CLOSE_LINGER_S, Connection, Refused, Shared
from pbd.h2.limits import Limits
from pbd.listeners import OneByOne, Sharing, grpc_sockets, tcp_port
from pbd.settings import Settings

log = logging.getLogger("pbd.grpc")

# Triton allows messages up to INT32_MAX both ways; gRPC's 4 MiB default breaks large tensors.
MAX_MESSAGE_BYTES = 2**31 - 1
# --grpc-max-connections 0: this share of the open-file limit, at most AUTO_MAX_CONNECTIONS
# (the daemon's other descriptors, workers and shared memory, need the rest).
AUTO_CONNECTION_SHARE = 0.75
AUTO_MAX_CONNECTIONS = 4096


def limits(settings: Settings) -> Limits:
    """What each gRPC connection may cost, from the settings (pbd.h2.limits)."""
    return Limits(
        max_header_list=settings.grpc_max_header_list_bytes,
        handshake_timeout=settings.grpc_handshake_timeout_secs,
        header_timeout=settings.grpc_header_timeout_secs,
        idle_timeout=settings.grpc_idle_timeout_secs,
        min_ping_interval=settings.grpc_http2_min_recv_ping_interval_without_data / 1000,
        max_ping_strikes=settings.grpc_http2_max_ping_strikes,
        pings_without_calls=settings.grpc_keepalive_permit_without_calls,
    )


def max_connections(settings: Settings) -> int:
    if settings.grpc_max_connections:
        return settings.grpc_max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return AUTO_MAX_CONNECTIONS
    return max(1, min(AUTO_MAX_CONNECTIONS, int(soft * AUTO_CONNECTION_SHARE)))


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS as Triton's ``--grpc-use-ssl*`` flags describe it; None for plaintext."""
    if not settings.grpc_use_ssl:
        return None
    if settings.grpc_use_ssl_mutual and not settings.grpc_root_cert:
        raise OSError("--grpc-use-ssl-mutual needs --grpc-root-cert to check client certificates")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    try:
        context.load_cert_chain(settings.grpc_server_cert, settings.grpc_server_key)
        if settings.grpc_root_cert:
            context.load_verify_locations(cafile=settings.grpc_root_cert)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"--grpc-use-ssl: cannot read a key or certificate: {exc}") from None
    if settings.grpc_use_ssl_mutual:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class GrpcServer:
    def __init__(self, calls: Calls, settings: Settings, tls: ssl.SSLContext | None) -> None:
        self.calls = calls
        self.settings = settings
        self.tls = tls
        self.shared = Shared(limits(settings))
        self.max_connections = max_connections(settings)
        self.refusing = False
        self.connections: set[Connection] = set()
        self.listeners: list[asyncio.Server | OneByOne] = []
        self.sharing: Sharing | None = None

    def _connection(self) -> Connection | Refused:
        if len(self.connections) >= self.max_connections:
            if not self.refusing:  # once per run of refusals, not once per connection
                self.refusing = True
                log.warning(
                    "gRPC connections refused: %d open, --grpc-max-connections %d",
                    len(self.connections),
                    self.max_connections,
                )
            return Refused(f"connection limit ({self.max_connections}) reached")
        self.refusing = False
        connection = Connection(self.calls, self._closed, self.shared)
        self.connections.add(connection)
        return connection

    def _closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        if self.sharing is not None:  # the other front ends see this one's count at once
            self.sharing.changed(0)

    async def start(
        self, sockets: list[socket.socket] | None = None, sharing: Sharing | None = None
    ) -> int:
        """Listen, on ``sockets`` or on sockets bound now as the settings say; the TCP port
        (0 for a Unix socket). OSError when it cannot bind. ``sharing``: the sockets are
        shared with other processes (front ends; ``pbd.listeners.OneByOne``)."""
        loop = asyncio.get_running_loop()
        self.sharing = sharing
        if sockets is None:
            sockets = grpc_sockets(self.settings)
        timeout = self._tls_timeout()
        for sock in sockets:
            listener: asyncio.Server | OneByOne
            if sharing is not None:
                listener = OneByOne(sock, self._connection, sharing, self.tls, timeout)
            elif sock.family == socket.AF_UNIX:
                listener = await loop.create_unix_server(
                    self._connection, sock=sock, ssl=self.tls, ssl_handshake_timeout=timeout
                )
            else:
                listener = await loop.create_server(
                    self._connection, sock=sock, ssl=self.tls, ssl_handshake_timeout=timeout
                )
            self.listeners.append(listener)
        return tcp_port(sockets)

    def _tls_timeout(self) -> float | None:
        timeout = self.settings.grpc_handshake_timeout_secs
        return timeout if self.tls is not None and timeout > 0 else None

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls, let running ones finish for ``grace`` seconds, then cancel them.
        A call is finished once its answer is sent: a handler that returned may leave DATA
        that the client's flow-control window holds back (a large answer), and closing then
        would cut it."""
        self.calls.accepting = False
        for listener in self.listeners:
            listener.close()
        for connection in list(self.connections):
            connection.go_away()
        deadline = time.monotonic() + (grace or 0.0)
        while self._busy() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # A client closes a connection that went away once its last stream ended. Closing it
        # first, with the client's last frames (WINDOW_UPDATE, PING) unread, resets it, and a
        # reset can cost the client the end of an answer it has not read yet.
        linger = time.monotonic() + CLOSE_LINGER_S
        while self.connections and time.monotonic() < linger:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.close()
        await asyncio.sleep(0)

    def _busy(self) -> bool:
        return bool(self.calls.active) or any(c.open_streams for c in self.connections)


def build_server(dataplane: ControlPlane, settings: Settings) -> GrpcServer:
    """The server, not listening yet. OSError or ValueError for a bad TLS or restriction flag."""
    restrictions = grpc_restrictions(settings.grpc_restricted_protocol)
    buffer = settings.grpc_stream_buffer_bytes
    calls = Calls(
        methods(InferenceServicer(dataplane, buffer), restrictions),
        MAX_MESSAGE_BYTES,
        settings.grpc_max_concurrent_rpcs or None,
        buffer,
    )
    return GrpcServer(calls, settings, tls_context(settings))
