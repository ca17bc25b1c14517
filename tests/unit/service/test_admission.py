"""The --max-queued-bytes budget: a total, a share per model, a trim after a flood."""

from __future__ import annotations

import asyncio

import pytest

from pbd.admission import ByteBudget
from pbd.errors import Code, PbdError
from pbd.memory import malloc

MIB = 1024 * 1024


def test_one_model_cannot_take_the_share_of_the_others() -> None:
    budget = ByteBudget(16 * MIB)
    budget.take("big", 8 * MIB)
    budget.take("big", 4 * MIB)
    with pytest.raises(PbdError) as caught:
        budget.take("big", 4 * MIB)
    assert caught.value.code is Code.RESOURCE_EXHAUSTED
    assert "over its share of 12582912 bytes" in caught.value.message
    for _ in range(100):  # another model's small requests all fit beside the flood
        budget.take("small", 32)
    with pytest.raises(PbdError, match="the daemon already holds"):
        budget.take("other", 4 * MIB)


def test_a_request_larger_than_the_budget_is_served_alone() -> None:
    budget = ByteBudget(MIB)
    budget.take("m", 4 * MIB)
    with pytest.raises(PbdError, match="the daemon already holds"):
        budget.take("n", 1)


def test_the_heap_is_trimmed_once_idle_after_a_flood(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(malloc, "trim_heap", lambda: trims.append(1))
    monkeypatch.setattr(malloc, "TRIM_IDLE_S", 0.01)

    async def run() -> None:
        budget = ByteBudget(16 * MIB)
        for _ in range(20):  # refused or admitted, 80 MiB came in
            try:
                budget.take("big", 4 * MIB)
            except PbdError:
                pass
        for _ in range(3):
            budget.give("big", 4 * MIB)
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert trims == [1]
