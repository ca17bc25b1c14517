"""The daemon's own small gRPC client, for ``pbd status`` (no tritonclient needed)."""

from __future__ import annotations

import grpc

from pbd._proto import grpc_service_pb2 as pb
from pbd.grpc.servicer import SERVICE
from pbd.types import IndexEntry


def repository_index(target: str, timeout: float = 10.0) -> list[IndexEntry]:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/RepositoryIndex",
            request_serializer=pb.RepositoryIndexRequest.SerializeToString,
            response_deserializer=pb.RepositoryIndexResponse.FromString,
        )
        response = call(pb.RepositoryIndexRequest(), timeout=timeout)
    return [IndexEntry(m.name, m.version, m.state, m.reason) for m in response.models]
