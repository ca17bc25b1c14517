"""Triton's restricted APIs on HTTP: API groups whose routes need a header.

``--http-restricted-api=<group>[,<group>...]:<key>=<value>`` (repeatable; the rules:
``pbd.restrictions``) makes every route of those groups require the header ``<key>: <value>``
(the name in any case, the value exact). Without it the answer is Triton's: 403 and
``{"error": "This API is restricted, expecting header '<key>'"}``, before the route looks at
the request (an unknown model, a wrong method: still 403). The check runs wherever a request
is answered: the edge (infer, health, metadata, config), aiohttp's routes, and a front end,
whose other requests the daemon's own server then checks again.

Which group a route belongs to is Triton's (``api_group``). A route of no group (the OpenAI
API under ``/v1``, a path that is not a route) is not restricted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pbd.restrictions import Restriction, parse_restrictions

FORBIDDEN = 403
FLAG = "http-restricted-api"
# /v2/<first>/...: the groups whose routes all start with one segment.
_BY_FIRST = {
    "health": "health",
    "repository": "model-repository",
    "systemsharedmemory": "shared-memory",
    "cudasharedmemory": "shared-memory",
    "trace": "trace",
    "logging": "logging",
}
# /v2/models/<model>[/versions/<version>]/<rest>
_BY_MODEL_ROUTE = {
    "": "metadata",
    "ready": "health",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "config": "model-config",
    "stats": "statistics",
    "trace/setting": "trace",
}


def api_group(path: str) -> str | None:
    """The group of the route at ``path`` (as the request names it, without the query)."""
    parts = path.split("/")  # "", "v2", ...
    if len(parts) < 2 or parts[0] or parts[1] != "v2":
        return None
    if len(parts) == 2:
        return "metadata"  # GET /v2: the server's metadata
    if parts[2] in _BY_FIRST:
        return _BY_FIRST[parts[2]]
    if parts[2] != "models" or len(parts) < 4:
        return None
    rest = parts[4:]
    if parts[3] == "stats" and not rest:
        return "statistics"  # every model's statistics
    if len(rest) >= 2 and rest[0] == "versions":
        rest = rest[2:]
    return _BY_MODEL_ROUTE.get("/".join(rest))


def refusal_message(rule: Restriction) -> str:
    return f"This API is restricted, expecting header '{rule.name}'"


class HttpRestrictions:
    """The HTTP port's restrictions: group -> the header its routes need."""

    def __init__(self, by_group: Mapping[str, Restriction]) -> None:
        self.by_group = dict(by_group)

    @classmethod
    def parse(cls, rules: list[str]) -> HttpRestrictions:
        """``--http-restricted-api``'s rules; ValueError with a rule's problem."""
        return cls(parse_restrictions(FLAG, rules))

    def __bool__(self) -> bool:
        return bool(self.by_group)

    def refusal(self, path: str, header: Callable[[str], str | bytes | None]) -> str | None:
        """Why a request to ``path`` whose headers ``header`` looks up is refused; None when
        it may go on."""
        group = api_group(path)
        rule = self.by_group.get(group) if group is not None else None
        if rule is None or rule.allows(header(rule.header)):
            return None
        return refusal_message(rule)
