"""The one path an edge answers an inference request through: run it, encode its result, hand
the result's shared memory back.

Every edge uses it (gRPC ModelInfer and each request of ModelStreamInfer, HTTP infer). An
untraced request, the usual case, is answered as soon as the worker's result is read when the
edge can send the answer itself (``InferRequest.respond``, see ``pbd.instance.inflight``); a
traced one gets its response span, and its RPC span ends the way the edge's protocol says
(``finishing``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from pbd.tracing.request import RequestTrace
from pbd.types import InferRequest, InferResult

T = TypeVar("T")
# The edge's way to end a traced call's RPC span with the status the call ends with.
Finishing = Callable[[RequestTrace], AbstractContextManager[None]]


async def answer_request(
    request: InferRequest,
    trace: RequestTrace | None,
    infer: Callable[[InferRequest], Awaitable[InferResult]],
    encode: Callable[[InferResult], T],
    finishing: Finishing,
    answer: Callable[[T], None] | None = None,
) -> T | None:
    """``infer(request)`` and ``encode`` its result, whose shared memory is handed back right
    after. Traced: the trace rides on the request, the response span covers the encoding, and
    ``finishing`` ends the RPC span, however the call ends.

    ``answer``: the edge can send the encoded answer itself, before ``infer`` returns. An
    untraced request then is answered as soon as its result is read (``InferRequest.respond``),
    and None is returned when it was."""
    if trace is None:
        if answer is not None:
            request.respond = functools.partial(_answer_now, encode, answer)
        with await infer(request) as result:
            return None if result.answered else encode(result)
    request.trace = trace
    with finishing(trace):
        with await infer(request) as result:
            replying = time.time_ns()
            response = encode(result)
        trace.responded(replying)
        return response


def _answer_now(
    encode: Callable[[InferResult], T], answer: Callable[[T], None], result: InferResult
) -> None:
    """``result`` encoded and answered, its memory handed back; left alone if it cannot be
    encoded (the request's own path encodes it again and reports why)."""
    try:
        response = encode(result)
    except Exception:  # noqa: BLE001 - reported by the request's own path
        return
    result.release()
    result.answered = True
    answer(response)
