"""The one table from pbd error codes to HTTP status codes (Triton's ``HttpCodeFromError``),
Triton's error body, and the end of a traced HTTP request's server span."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from pbd.errors import Code, PbdError

if TYPE_CHECKING:
    from pbd.tracing.request import RequestTrace

# Triton's HttpCodeFromError; RESOURCE_EXHAUSTED (pbd's own) is retryable: 503. Every other
# code is 400.
HTTP_STATUS = {
    Code.INTERNAL: 500,
    Code.NOT_FOUND: 404,
    Code.UNAVAILABLE: 503,
    Code.UNSUPPORTED: 501,
    Code.RESOURCE_EXHAUSTED: 503,
}

# Triton's content type for every JSON body, answers and errors alike: no charset parameter
# (aiohttp's json_response would add one), which clients compare.
JSON_CONTENT_TYPE = "application/json"


def http_status(code: Code) -> int:
    return HTTP_STATUS.get(code, 400)


def error_response(status: int, message: str) -> web.Response:
    """Triton's error body: ``{"error": "<message>"}``, as ``application/json`` (no charset
    parameter: Triton's exact content type, which clients compare)."""
    body = json.dumps({"error": message}).encode()
    return web.Response(body=body, status=status, content_type=JSON_CONTENT_TYPE)


def finish_failed(trace: RequestTrace, exc: BaseException) -> None:
    """End the server span of a request that failed with ``exc``: as the semantic conventions
    for HTTP servers say, only a 5xx marks it an error."""
    if isinstance(exc, PbdError):
        status = http_status(exc.code)
        trace.finish(status, exc.message if status >= 500 else None)
    else:
        trace.finish(500, repr(exc))


@contextlib.contextmanager
def finishing(trace: RequestTrace) -> Iterator[None]:
    """The HTTP server span ends with the status the response will carry."""
    try:
        yield
    except BaseException as exc:
        finish_failed(trace, exc)
        raise
    trace.finish(200)
