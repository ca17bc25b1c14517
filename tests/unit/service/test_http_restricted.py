"""pbd.http.restricted: which group each HTTP route is in, and the 403 a request of a restricted
group gets without its header, from the edge and from aiohttp's routes alike (the real server
on a free port, over a dataplane with one model: dataplane_samples)."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest
from dataplane_samples import EchoPlane

from pbd.http.restricted import HttpRestrictions, api_group
from pbd.http.server import HttpFrontend
from pbd.restrictions import GROUPS, Restriction
from pbd.settings import Settings

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes
INFER = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("/v2", "metadata"),
        ("/v2/health/live", "health"),
        ("/v2/health/ready", "health"),
        ("/v2/models/m", "metadata"),
        ("/v2/models/m/versions/2", "metadata"),
        ("/v2/models/m/ready", "health"),
        ("/v2/models/m/versions/2/ready", "health"),
        ("/v2/models/m/infer", "inference"),
        ("/v2/models/m/versions/2/infer", "inference"),
        ("/v2/models/m/generate", "inference"),
        ("/v2/models/m/versions/2/generate_stream", "inference"),
        ("/v2/models/m/config", "model-config"),
        ("/v2/models/stats", "statistics"),
        ("/v2/models/m/stats", "statistics"),
        ("/v2/models/stats/ready", "health"),  # a model called "stats"
        ("/v2/models/m/trace/setting", "trace"),
        ("/v2/trace/setting", "trace"),
        ("/v2/logging", "logging"),
        ("/v2/repository/index", "model-repository"),
        ("/v2/repository/models/m/load", "model-repository"),
        ("/v2/systemsharedmemory/region/r/register", "shared-memory"),
        ("/v2/cudasharedmemory/status", "shared-memory"),
        ("/v1/chat/completions", None),
        ("/v2/models/m/nothing", None),
        ("/metrics", None),
        ("/", None),
    ],
)
def test_each_route_is_in_tritons_group(path: str, group: str | None) -> None:
    assert api_group(path) == group


def test_every_v2_route_the_server_serves_is_in_a_group() -> None:
    """A route added later without a group would be served to anyone: it must be named."""
    server = HttpFrontend(EchoPlane(), Settings())  # type: ignore[arg-type]
    paths = {
        re.sub(r"\{[^}]*\}", "x", resource.canonical) for resource in server.app.router.resources()
    }
    v2 = sorted(p for p in paths if p == "/v2" or p.startswith("/v2/"))
    assert len(v2) > 20 and [p for p in v2 if api_group(p) is None] == []
    assert {api_group(p) for p in v2} == set(GROUPS)
    assert {api_group(p) for p in paths - set(v2)} == {None}


def test_the_header_is_named_as_given_and_matched_in_any_case() -> None:
    rules = HttpRestrictions.parse(["inference:Admin-Key=s3"])
    assert rules.by_group == {"inference": Restriction("Admin-Key", "s3")}
    headers = {"admin-key": "s3"}
    assert rules.refusal("/v2/models/m/infer", headers.get) is None
    assert rules.refusal("/v2/models/m/infer", {}.get) == (
        "This API is restricted, expecting header 'Admin-Key'"
    )
    assert rules.refusal("/v2/models/m/config", {}.get) is None  # another group
    assert not HttpRestrictions.parse([]) and rules


def _served(restricted: list[str]) -> tuple[EchoPlane, HttpFrontend]:
    plane = EchoPlane()
    settings = Settings(http_address="127.0.0.1", http_port=0, http_restricted_api=restricted)
    return plane, HttpFrontend(plane, settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "encoding",
    [
        "identity",  # the edge answers infer and health itself
        "gzip",  # a client that takes gzip is served by aiohttp's routes
    ],
)
def test_a_restricted_group_needs_the_header(encoding: str) -> None:
    async def main() -> None:
        plane, server = _served(["inference,health:Admin-Key=s3cret", "model-repository:r=1"])
        await server.start()
        url = f"http://127.0.0.1:{server.port}"
        base = {"Accept-Encoding": encoding}
        try:
            async with aiohttp.ClientSession() as session:
                for method, path, body in [
                    ("POST", "/v2/models/echo/infer", INFER),
                    ("POST", "/v2/models/unknown/infer", INFER),  # refused before the lookup
                    ("GET", "/v2/models/echo/infer", None),  # and before the method
                    ("GET", "/v2/health/ready", None),
                    ("GET", "/v2/models/echo/ready", None),
                ]:
                    for wrong in ({}, {"Admin-Key": "S3CRET"}, {"Other": "s3cret"}):
                        async with session.request(
                            method, url + path, json=body, headers={**base, **wrong}
                        ) as response:
                            assert response.status == 403, (path, wrong)
                            assert await response.json() == {
                                "error": "This API is restricted, expecting header 'Admin-Key'"
                            }
                assert plane.requests == []
                for key in ("Admin-Key", "admin-key", "ADMIN-KEY"):
                    headers = {**base, key: "s3cret"}
                    async with session.post(
                        f"{url}/v2/models/echo/infer", json=INFER, headers=headers
                    ) as response:
                        assert response.status == 200
                    async with session.get(f"{url}/v2/health/ready", headers=headers) as response:
                        assert response.status == 200
                async with session.get(f"{url}/v2/models/echo/config", headers=base) as response:
                    assert response.status == 200  # model-config is not restricted
                async with session.post(f"{url}/v2/repository/index", headers=base) as response:
                    assert response.status == 403
                    assert "expecting header 'r'" in (await response.json())["error"]
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(main(), WAIT_S))
