"""Requests and a stand-in for the dispatcher's instances, for the scheduler unit tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pbd.scheduling.scheduler import WorkItem
from pbd.types import InferRequest, InferResult, PreparedInput, PreparedRequest


@dataclass
class FakePlan:
    name: str


@dataclass
class FakeInstance:
    """Stands for an instance's slot in the dispatcher: a name and a load."""

    name: str
    inflight: int = 0
    plan: FakePlan = field(init=False)

    def __post_init__(self) -> None:
        self.plan = FakePlan(self.name)


class Place:
    def __init__(self, *names: str) -> None:
        self.instances = [FakeInstance(n) for n in names]

    def available(self) -> list[FakeInstance]:
        return list(self.instances)

    def instance_names(self) -> list[str]:
        return [i.name for i in self.instances]

    async def wait_capacity(self) -> None:
        await asyncio.sleep(0.01)


def prepared(
    ident: int, batch: int = 1, dims: tuple[int, ...] = (2,), **kw: object
) -> PreparedRequest:
    request = InferRequest("m", "1", str(ident), [])
    inputs = [PreparedInput("X", "FP32", (batch, *dims), memoryview(b""))]
    return PreparedRequest(request, inputs, ["Y"], **kw)  # type: ignore[arg-type]


def ids(items: list[WorkItem]) -> list[str]:
    return [i.prepared.request.id for i in items]


def result(ident: str) -> InferResult:
    return InferResult("m", "1", ident, [])
