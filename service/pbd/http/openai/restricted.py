"""``--openai-restricted-api``: OpenAI routes a client may call only with a header and its
value, as Triton's OpenAI front end restricts them.

The rules are written as pbd's other restricted flags, ``<group>[,<group>...]:<key>=<value>``
(``pbd.restrictions``; Triton's OpenAI front end takes the same three parts as separate
words). The groups are Triton's for the routes pbd serves on this port: ``inference`` (POST
/v1/chat/completions, /v1/completions), ``embedding`` (POST /v1/embeddings) and
``model-repository`` (GET /v1/models, /v1/models/<model>). A request of a restricted group
without the header's exact value is answered as Triton's OpenAI front end answers it: 401 and
an OpenAI error object of type ``authentication_error``, before anything else (its API key
too).
"""

from __future__ import annotations

from collections.abc import Mapping

from pbd.http.openai.errors import ApiError
from pbd.restrictions import OPENAI_GROUPS, Restriction, parse_restrictions

FLAG = "openai-restricted-api"
# Each group's routes: a method and a path prefix, as Triton's front end matches them.
ROUTES = {
    "inference": (("POST", "/v1/chat/completions"), ("POST", "/v1/completions")),
    "embedding": (("POST", "/v1/embeddings"),),
    "model-repository": (("GET", "/v1/models"),),
}
assert tuple(ROUTES) == OPENAI_GROUPS


class OpenAIRestrictions:
    """Group -> the header its routes need."""

    def __init__(self, by_group: Mapping[str, Restriction]) -> None:
        self.by_group = dict(by_group)

    @classmethod
    def parse(cls, rules: list[str]) -> OpenAIRestrictions:
        """The flag's rules; ValueError naming the rule's problem."""
        return cls(parse_restrictions(FLAG, rules, groups_known=OPENAI_GROUPS))

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> None:
        """Raises a 401 ApiError when the route at ``method path`` belongs to a restricted
        group and ``headers`` (looked up in any case) lack its value."""
        for group, rule in self.by_group.items():
            if not any(method == m and path.startswith(p) for m, p in ROUTES[group]):
                continue
            if not rule.allows(headers.get(rule.name)):
                raise ApiError(
                    401,
                    f"This API is restricted, expecting header '{rule.name}' with valid value",
                    type="authentication_error",
                    code="invalid_auth",
                )
            return
