"""A front end's way to the daemon for every HTTP request it does not answer itself: the
request, passed on whole to the daemon's own HTTP server on a private Unix socket, and its
answer passed back.

Only the daemon holds what those routes read and change (health, metadata, model control,
statistics, shared-memory registration, trace and log settings; the models off the direct
path, for generate and the OpenAI API: ``pbd.http.elsewhere``), so it answers them, with the
same handlers, codes and messages as when it serves the port itself. The body was decoded
(Content-Encoding) by this front end's server: it goes on decoded; the answer goes back as the
daemon encoded it.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

# Hop-by-hop headers (RFC 9110 §7.6.1), and what no longer describes a decoded body.
_REQUEST_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
    }
)
_RESPONSE_DROP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "upgrade", "content-length", "date", "server"}
)


class HttpProxy:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.socket_path),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        # Repeated headers stay repeated (a dict would keep one of them).
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in _REQUEST_DROP
        )
        # The daemon compresses only what the client asked for (aiohttp's client would ask
        # for gzip on its own).
        headers.setdefault("Accept-Encoding", "identity")
        try:
            async with self._client().request(
                request.method,
                f"http://pbd{request.path_qs}",
                headers=headers,
                data=body,
                allow_redirects=False,
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in _RESPONSE_DROP:
                        response.headers.add(key, value)
                if upstream.content_length is not None:
                    response.content_length = upstream.content_length
                await response.prepare(request)
                # As it comes (event streams: /generate_stream, /v1 with stream), at the
                # client's pace: a client that does not read holds the daemon's writes too.
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except aiohttp.ClientError as exc:
            return web.json_response(
                {"error": f"the daemon is not reachable from this front end: {exc}"}, status=503
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
