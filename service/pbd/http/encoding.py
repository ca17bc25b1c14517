"""Content-Encoding both ways for the HTTP binding.

Request bodies in gzip or deflate are decoded (by the edge, :func:`decode_body`, or by
aiohttp for the connections it serves); any other encoding would reach the parser still
encoded, so it is refused up front. Answers are compressed when the client says it accepts
gzip or deflate, as Triton does: deflate when it accepts both, the order pbd's aiohttp
answers always took (``answer_coding``).
"""

from __future__ import annotations

import zlib

from aiohttp import web

from pbd.errors import Code, PbdError

DECODED = ("", "identity", "gzip", "deflate")
ANSWER_CODINGS = ("deflate", "gzip")  # tried in this order against Accept-Encoding


def compress(request: web.Request, response: web.StreamResponse) -> None:
    accept = request.headers.get("Accept-Encoding", "")
    if "gzip" in accept or "deflate" in accept:
        response.enable_compression()


def check_content_encoding(request: web.Request) -> None:
    """Only encodings the server decodes: any other would reach the parser still encoded."""
    refuse_encoding(request.headers.get("Content-Encoding", ""))


def refuse_encoding(header: str) -> str:
    """``Content-Encoding``'s coding, lower-cased ("" for none or identity); INVALID_ARG for
    one the server does not decode."""
    encoding = header.strip().lower()
    if encoding not in DECODED:
        raise PbdError(
            Code.INVALID_ARG,
            f"unsupported Content-Encoding '{encoding}': the server accepts gzip, deflate or none",
        )
    return "" if encoding == "identity" else encoding


class Undecodable(Exception):
    """A body that does not decode as its Content-Encoding says, or decodes past the limit:
    ``status`` and Triton's error message; the connection is closed after the answer (what
    follows on it cannot be trusted to start where the body ended)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded from ``encoding`` (gzip, or deflate: zlib's format, or a raw stream as
    some clients send it), at most ``limit`` bytes once decoded (0: no limit)."""
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:  # deflate: zlib's header names the method 8 in its first byte's low bits
        wbits = zlib.MAX_WBITS if body[:1] and body[0] & 0x0F == 8 else -zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    try:
        decoded = decoder.decompress(body, limit + 1 if limit else 0)
    except zlib.error:
        decoded, complete = b"", False
    else:
        complete = decoder.eof and not decoder.unconsumed_tail
    if limit and len(decoded) > limit:
        raise Undecodable(
            413, f"request body exceeds the limit of {limit} bytes (--http-max-body-bytes)"
        )
    if not complete:
        raise Undecodable(400, f"the request body does not decode as Content-Encoding '{encoding}'")
    return decoded


def answer_coding(accept: bytes) -> str:
    """The coding an answer goes in for the request's ``Accept-Encoding`` ("" for none)."""
    accept = accept.lower()
    return next((coding for coding in ANSWER_CODINGS if coding.encode() in accept), "")


def compress_body(body: bytes, coding: str) -> bytes:
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()
