"""Content-Encoding both ways for the HTTP binding.

aiohttp decompresses gzip and deflate request bodies itself; any other encoding would reach
the parser still encoded, so it is refused up front. Responses are compressed when the client
says it accepts gzip or deflate, as Triton does.
"""

from __future__ import annotations

from aiohttp import web

from pbd.errors import Code, PbdError

DECODED = ("", "identity", "gzip", "deflate")


def compress(request: web.Request, response: web.StreamResponse) -> None:
    accept = request.headers.get("Accept-Encoding", "")
    if "gzip" in accept or "deflate" in accept:
        response.enable_compression()


def check_content_encoding(request: web.Request) -> None:
    """Only encodings the server decodes: any other would reach the parser still encoded."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in DECODED:
        raise PbdError(
            Code.INVALID_ARG,
            f"unsupported Content-Encoding '{encoding}': the server accepts gzip, deflate or none",
        )
