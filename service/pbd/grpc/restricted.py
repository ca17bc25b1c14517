"""Triton's restricted protocols: API groups that need a header to be called.

``--grpc-restricted-protocol=<group>[,<group>...]:<key>=<value>`` (repeatable) makes every RPC
of those groups require the gRPC metadata ``triton-grpc-protocol-<key>: <value>``; others get
UNAVAILABLE "This protocol is restricted, expecting header '<header>'". Groups as Triton's.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from pbd.grpc.protocol import Context

HEADER_PREFIX = "triton-grpc-protocol-"
GROUPS: dict[str, tuple[str, ...]] = {
    "health": ("ServerLive", "ServerReady", "ModelReady", "Check"),
    "metadata": ("ServerMetadata", "ModelMetadata"),
    "inference": ("ModelInfer", "ModelStreamInfer"),
    "shared-memory": (
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
    ),  # fmt: skip
    "model-config": ("ModelConfig",),
    "model-repository": ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    "statistics": ("ModelStatistics",),
    "trace": ("TraceSetting",),
    "logging": ("LogSettings",),
}


@dataclass(frozen=True)
class Restriction:
    header: str
    value: str


def parse_restrictions(rules: list[str]) -> dict[str, Restriction]:
    """RPC name -> the header it needs; ValueError with the rule's problem."""
    out: dict[str, Restriction] = {}
    for rule in rules:
        groups, sep, pair = rule.partition(":")
        key, eq, value = pair.partition("=")
        if not sep or not eq or not key or not groups:
            raise ValueError(
                f"--grpc-restricted-protocol '{rule}': expected <group>[,<group>...]:<key>=<value>"
            )
        for group in groups.split(","):
            if group not in GROUPS:
                raise ValueError(
                    f"--grpc-restricted-protocol '{rule}': unknown group '{group}' "
                    f"(groups: {', '.join(GROUPS)})"
                )
            for rpc in GROUPS[group]:
                if rpc in out:
                    raise ValueError(f"--grpc-restricted-protocol: group '{group}' given twice")
                out[rpc] = Restriction(HEADER_PREFIX + key.lower(), value)
    return out


def _allowed(context: Context, rule: Restriction) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == rule.header and hmac.compare_digest(str(value), rule.value):
            return True
    return False


def guard_unary(method: Callable[..., Any], rule: Restriction) -> Callable[..., Any]:
    @functools.wraps(method)
    async def guarded(request: Any, context: Context) -> Any:
        if not _allowed(context, rule):
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"This protocol is restricted, expecting header '{rule.header}'",
            )
        return await method(request, context)

    return guarded


def guard_stream(method: Callable[..., Any], rule: Restriction) -> Callable[..., Any]:
    @functools.wraps(method)
    async def guarded(requests: Any, context: Context) -> AsyncIterator[Any]:
        if not _allowed(context, rule):
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"This protocol is restricted, expecting header '{rule.header}'",
            )
        async for response in method(requests, context):
            yield response

    return guarded
