"""Triton's restricted protocols on gRPC: API groups whose RPCs need a header.

``--grpc-restricted-protocol=<group>[,<group>...]:<key>=<value>`` (repeatable; the rules:
``pbd.restrictions``) makes every RPC of those groups require the gRPC metadata
``triton-grpc-protocol-<key>: <value>``; others get UNAVAILABLE "This protocol is restricted,
expecting header '<header>'". The groups' RPCs as Triton's.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from pbd.grpc.protocol import Context
from pbd.restrictions import Restriction, parse_restrictions

HEADER_PREFIX = "triton-grpc-protocol-"
RPCS: dict[str, tuple[str, ...]] = {
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


def grpc_restrictions(rules: list[str]) -> dict[str, Restriction]:
    """RPC name -> the header it needs; ValueError with the rule's problem."""
    groups = parse_restrictions("grpc-restricted-protocol", rules, HEADER_PREFIX)
    return {rpc: rule for group, rule in groups.items() for rpc in RPCS[group]}


def _allowed(context: Context, rule: Restriction) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == rule.header and rule.allows(value):
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
