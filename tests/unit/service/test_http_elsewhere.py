"""pbd.http.elsewhere: a front end answers the generate and OpenAI requests of the models it
runs itself and passes the others on, whole, to whoever answers them (the daemon)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from pbd.http.elsewhere import Elsewhere, body_target, path_target

WAIT_S = 10.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))


async def _answer(who: str, request: web.Request) -> web.Response:
    """Says who answered, and the body it read (the body must reach either whole)."""
    return web.Response(text=f"{who}:{(await request.read()).decode()}")


def _routes(here: set[tuple[str, str]]) -> web.Application:
    elsewhere = Elsewhere(lambda model, version: (model, version) in here,
                          lambda request: _answer("daemon", request))  # fmt: skip

    async def local(request: web.Request) -> web.Response:
        return await _answer("here", request)

    app = web.Application()
    app.router.add_post("/v2/models/{model}/generate", elsewhere.unless_here(local, path_target))
    app.router.add_post("/v2/models/{model}/versions/{version}/generate",
                        elsewhere.unless_here(local, path_target))  # fmt: skip
    app.router.add_post("/v1/completions", elsewhere.unless_here(local, body_target))
    return app


async def _post(server: TestServer, path: str, body: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url(path), data=body.encode()) as response,
    ):
        assert response.status == 200
        return await response.text()


def test_the_models_run_here_are_answered_here_and_the_rest_elsewhere() -> None:
    async def scenario() -> None:
        server = TestServer(_routes({("m", ""), ("m", "2")}))
        await server.start_server()
        try:
            assert await _post(server, "/v2/models/m/generate", "{}") == "here:{}"
            assert await _post(server, "/v2/models/m/versions/2/generate", "a") == "here:a"
            assert await _post(server, "/v2/models/m/versions/1/generate", "b") == "daemon:b"
            assert await _post(server, "/v2/models/other/generate", "c") == "daemon:c"
            body = '{"model": "m", "prompt": "x"}'
            assert await _post(server, "/v1/completions", body) == f"here:{body}"
            for other in ('{"model": "other"}', '{"model": 3}', "[1]", "{not json", ""):
                assert await _post(server, "/v1/completions", other) == f"daemon:{other}"
        finally:
            await server.close()

    run(scenario)
