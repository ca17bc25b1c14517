"""Build the grpc.aio server: handlers, message-size limits and keepalive as Triton sets them."""

from __future__ import annotations

import os
from pathlib import Path

import grpc

from pbd.dataplane import DataPlane
from pbd.grpc.restricted import parse_restrictions
from pbd.grpc.servicer import InferenceServicer, generic_handlers
from pbd.settings import Settings

# Triton allows messages up to INT32_MAX both ways; gRPC's 4 MiB default breaks large tensors.
MAX_MESSAGE_BYTES = 2**31 - 1

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Triton's keepalive defaults (gRPC core's).
    ("grpc.keepalive_time_ms", 7_200_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.so_reuseport", 0),
]


def _credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS as Triton's ``--grpc-use-ssl*`` flags describe it; None for plaintext."""
    if not settings.grpc_use_ssl:
        return None
    try:
        key = Path(settings.grpc_server_key).read_bytes()
        cert = Path(settings.grpc_server_cert).read_bytes()
        root = Path(settings.grpc_root_cert).read_bytes() if settings.grpc_root_cert else None
    except OSError as exc:
        raise OSError(f"--grpc-use-ssl: cannot read a key or certificate: {exc}") from None
    if settings.grpc_use_ssl_mutual and root is None:
        raise OSError("--grpc-use-ssl-mutual needs --grpc-root-cert to check client certificates")
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=settings.grpc_use_ssl_mutual
    )


def build_server(dataplane: DataPlane, settings: Settings) -> tuple[grpc.aio.Server, int]:
    """The server, not started yet, and the port it bound (0 for a Unix socket).

    ``--grpc-address unix:/path`` listens on a Unix socket (file mode from
    ``--grpc-socket-mode``); anything else is a host for ``--grpc-port``.
    """
    server = grpc.aio.server(
        options=SERVER_OPTIONS,
        maximum_concurrent_rpcs=settings.grpc_max_concurrent_rpcs or None,
    )
    restrictions = parse_restrictions(settings.grpc_restricted_protocol)
    server.add_generic_rpc_handlers(generic_handlers(InferenceServicer(dataplane), restrictions))
    address = settings.grpc_address
    if address.startswith("unix:"):
        target = address
    else:
        host = f"[{address}]" if ":" in address and not address.startswith("[") else address
        target = f"{host}:{settings.grpc_port}"
    credentials = _credentials(settings)
    if credentials is None:
        bound = server.add_insecure_port(target)
    else:
        bound = server.add_secure_port(target, credentials)
    if bound == 0 and not address.startswith("unix:"):
        raise OSError(f"cannot bind gRPC server to {target}")
    return server, bound


def secure_socket(settings: Settings) -> None:
    """Give a Unix-socket listener its configured file mode once it exists."""
    if settings.grpc_address.startswith("unix:"):
        os.chmod(settings.grpc_address.removeprefix("unix:"), int(settings.grpc_socket_mode, 8))
