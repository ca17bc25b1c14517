"""Build the grpc.aio server: handlers, message-size limits and keepalive as Triton sets them."""

from __future__ import annotations

import grpc

from pbd.dataplane import DataPlane
from pbd.grpc.servicer import InferenceServicer, generic_handlers

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


def build_server(dataplane: DataPlane, address: str, port: int) -> tuple[grpc.aio.Server, int]:
    """The server, not started yet, and the port it bound (useful when ``port`` is 0)."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers(generic_handlers(InferenceServicer(dataplane)))
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC server to {host}:{port}")
    return server, bound
