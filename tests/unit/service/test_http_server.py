"""pbd.http.server: the REST binding over the same dataplane: each route converts, calls the
dataplane, converts back; a PbdError becomes Triton's HTTP status and ``{"error": ...}``. The
real server on a free port and aiohttp's client, over a dataplane with one model
(dataplane_samples)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
from dataplane_samples import EchoPlane

from pbd.http.server import HttpFrontend
from pbd.settings import Settings

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes


def run(test: Callable[[aiohttp.ClientSession, str, EchoPlane], Awaitable[None]]) -> None:
    async def main() -> None:
        plane = EchoPlane()
        server = HttpFrontend(plane, Settings(http_address="127.0.0.1", http_port=0))  # type: ignore[arg-type]
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{server.port}"
                await asyncio.wait_for(test(session, url, plane), WAIT_S)
        finally:
            await server.stop()

    asyncio.run(main())


def test_health_and_metadata_are_the_dataplanes() -> None:
    async def test(session: aiohttp.ClientSession, url: str, plane: EchoPlane) -> None:
        async with session.get(f"{url}/v2/health/live") as response:
            assert response.status == 200
        plane.ready = False
        async with session.get(f"{url}/v2/health/ready") as response:
            assert response.status == 400
        async with session.get(f"{url}/v2") as response:
            metadata = await response.json()
        assert metadata["name"] == "pbd" and metadata["extensions"] == [
            "model_repository",
            "statistics",
        ]
        async with session.get(f"{url}/v2/models/echo") as response:
            model = await response.json()
        assert model["versions"] == ["1"]
        assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [4]}]
        async with session.get(f"{url}/v2/models/echo/config") as response:
            assert (await response.json())["output"][0]["name"] == "OUTPUT0"

    run(test)


def test_infer_answers_with_the_results_outputs_then_releases_them() -> None:
    async def test(session: aiohttp.ClientSession, url: str, plane: EchoPlane) -> None:
        body = {
            "id": "r1",
            "inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
        }
        async with session.post(f"{url}/v2/models/echo/infer", json=body) as response:
            assert response.status == 200
            answer = await response.json()
        assert answer["id"] == "r1" and answer["model_name"] == "echo"
        assert answer["outputs"] == [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": [1.0, 2.0, 3.0, 4.0]}
        ]
        assert plane.released == ["r1"]
        (request,) = plane.requests
        assert request.respond is None  # the HTTP edge answers once infer returns

    run(test)


def test_a_dataplane_error_is_tritons_http_status() -> None:
    async def test(session: aiohttp.ClientSession, url: str, plane: EchoPlane) -> None:
        body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [0] * 4}]}
        async with session.post(f"{url}/v2/models/nope/infer", json=body) as response:
            assert response.status == 503  # UNAVAILABLE, as Triton's HttpCodeFromError
            assert await response.json() == {
                "error": "Request for unknown model: 'nope' is not found"
            }
        async with session.post(f"{url}/v2/models/echo/infer", data=b"{not json") as response:
            assert response.status == 400
            assert "error" in await response.json()

    run(test)
