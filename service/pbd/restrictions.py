"""Triton's restricted APIs: groups of calls a client may make only with a header and its value.

``--grpc-restricted-protocol``, ``--http-restricted-api`` and ``--openai-restricted-api``
take the same rules,
``<group>[,<group>...]:<key>=<value>`` (repeatable; a group in one rule only). Each binding
says which of its calls belong to which group (``pbd.grpc.restricted``,
``pbd.http.restricted``) and how it refuses a call without the header; this module holds what
they share: the groups, the rules, and the check of a header's value.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

# Triton's API groups, in its order.
GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
# Triton's OpenAI front end's groups (``--openai-restricted-api``) of the routes pbd serves.
OPENAI_GROUPS = ("inference", "embedding", "model-repository")


@dataclass(frozen=True)
class Restriction:
    """A call needs header ``name`` (any case) with exactly ``value``."""

    name: str  # as the refusal names it
    value: str

    @property
    def header(self) -> str:
        """The name in lower case, as gRPC metadata and HTTP header lookups take it."""
        return self.name.lower()

    def allows(self, given: str | bytes | None) -> bool:
        """``given`` (the header's value, None when absent) is the value, compared in constant
        time."""
        if given is None:
            return False
        raw = given if isinstance(given, bytes) else given.encode("utf-8", "surrogateescape")
        return hmac.compare_digest(raw, self.value.encode("utf-8", "surrogateescape"))


def parse_restrictions(
    flag: str, rules: list[str], prefix: str = "", groups_known: tuple[str, ...] = GROUPS
) -> dict[str, Restriction]:
    """Group (of ``groups_known``) -> the header it needs (``prefix`` + the rule's key: gRPC's
    names its headers ``triton-grpc-protocol-<key>``); ValueError naming ``flag`` and the
    rule's problem."""
    out: dict[str, Restriction] = {}
    for rule in rules:
        groups, sep, pair = rule.partition(":")
        key, eq, value = pair.partition("=")
        if not sep or not eq or not key or not value or not groups:
            raise ValueError(f"--{flag} '{rule}': expected <group>[,<group>...]:<key>=<value>")
        for group in groups.split(","):
            if group not in groups_known:
                raise ValueError(
                    f"--{flag} '{rule}': unknown group '{group}' "
                    f"(groups: {', '.join(groups_known)})"
                )
            if group in out:
                raise ValueError(f"--{flag}: group '{group}' given twice")
            out[group] = Restriction(prefix + key, value)
    return out
