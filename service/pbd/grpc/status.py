"""The one table from pbd error codes to gRPC status codes (Triton's mapping), and the end of
a traced RPC's server span with the status the call ends with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import grpc

from pbd.errors import Code, PbdError

if TYPE_CHECKING:
    from pbd.tracing.request import RequestTrace

GRPC_STATUS: dict[Code, grpc.StatusCode] = {
    Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.CANCELLED: grpc.StatusCode.CANCELLED,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@contextlib.contextmanager
def finishing(trace: RequestTrace) -> Iterator[None]:
    """End the RPC span with the status the call (or the streamed request) ends with."""
    try:
        yield
    except PbdError as exc:
        trace.finish(GRPC_STATUS[exc.code].value[0], exc.message)
        raise
    except BaseException as exc:
        trace.finish(grpc.StatusCode.UNKNOWN.value[0], repr(exc))
        raise
    trace.finish()
