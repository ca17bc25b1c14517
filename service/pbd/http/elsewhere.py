"""In a front-end process: which generate and OpenAI requests it answers itself, and who
answers the rest.

A front end runs the requests of the versions on its direct path itself (their configuration
came with its table; the worker's responses go from it to the client). Every other model (an
ensemble, sequence batching, a traced one, a version not ready...) needs the daemon's
scheduling, so its requests go to the daemon's own HTTP server whole (``pbd.fronts.http_proxy``),
which answers them as it answers every route when it serves the port itself: one copy of each
route, run in whichever process holds what it needs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The (model, version) a request is for; None when it names none this process could read.
Target = Callable[[web.Request], Awaitable[tuple[str, str] | None]]


@dataclass(frozen=True)
class Elsewhere:
    here: Callable[[str, str], bool]  # whether this process runs (model, version) itself
    handler: Handler  # answers the others (the daemon)

    def unless_here(self, handler: Handler, target: Target) -> Handler:
        """``handler`` for the requests of the models run here, ``self.handler`` for the rest."""

        async def route(request: web.Request) -> web.StreamResponse:
            found = await target(request)
            if found is not None and self.here(*found):
                return await handler(request)
            return await self.handler(request)

        return route


async def path_target(request: web.Request) -> tuple[str, str]:
    """The model and version a ``/v2/models/<m>[/versions/<v>]/...`` route names."""
    return request.match_info["model"], request.match_info.get("version", "")


async def body_target(request: web.Request) -> tuple[str, str] | None:
    """The model an OpenAI request's JSON body names (its latest version); None when the body
    names none (whoever answers says what is wrong with it)."""
    try:
        doc = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    return (model, "") if isinstance(model, str) else None
