"""Running an inference request and encoding its answer, with its RPC span when the request is
traced: one implementation for every edge (gRPC ModelInfer and each request of
ModelStreamInfer, HTTP infer), each passing how its protocol ends the span."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from pbd.tracing.request import RequestTrace
from pbd.types import InferRequest, InferResult

T = TypeVar("T")
# The edge's way to end a traced call's RPC span with the status the call ends with.
Finishing = Callable[[RequestTrace], AbstractContextManager[None]]


async def run_traced(
    request: InferRequest,
    trace: RequestTrace | None,
    infer: Callable[[InferRequest], Awaitable[InferResult]],
    encode: Callable[[InferResult], T],
    finishing: Finishing,
) -> T:
    """``infer(request)`` and ``encode`` its result, whose shared memory is handed back right
    after. Traced: the trace rides on the request, the response span covers the encoding, and
    ``finishing`` ends the RPC span, however the call ends."""
    if trace is None:
        with await infer(request) as result:
            return encode(result)
    request.trace = trace
    with finishing(trace):
        with await infer(request) as result:
            replying = time.time_ns()
            response = encode(result)
        trace.responded(replying)
        return response
