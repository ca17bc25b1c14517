"""pbd.grpc.deadlines: one timer for every call's deadline."""

from __future__ import annotations

import asyncio

from pbd.grpc.deadlines import Deadlines


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_each_call_expires_at_its_own_deadline_in_order() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[str] = []
        deadlines.add(loop, "late", 0.06, lambda: fired.append("late"))
        deadlines.add(loop, "early", 0.02, lambda: fired.append("early"))  # re-arms the timer
        deadlines.add(loop, "middle", 0.04, lambda: fired.append("middle"))
        await asyncio.sleep(0.03)
        assert fired == ["early"]
        await asyncio.sleep(0.05)
        return fired

    assert _run(main()) == ["early", "middle", "late"]


def test_a_call_that_ends_in_time_never_expires_and_leaves_no_timer() -> None:
    async def main() -> tuple[list[str], int]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[str] = []
        for i in range(100):
            deadlines.add(loop, i, 0.01, lambda i=i: fired.append(str(i)))
            deadlines.discard(i)
        deadlines.discard("never added")  # harmless
        await asyncio.sleep(0.03)
        return fired, len(deadlines)

    fired, pending = _run(main())
    assert fired == [] and pending == 0


def test_only_the_calls_past_their_deadline_expire_when_the_timer_fires() -> None:
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[object] = []
        deadlines.add(loop, "a", 0.01, lambda: fired.append("a"))
        deadlines.add(loop, "b", 10.0, lambda: fired.append("b"))
        deadlines.discard("a")  # the timer armed for "a" still fires, and finds nothing due
        await asyncio.sleep(0.03)
        assert fired == [] and len(deadlines) == 1
        deadlines.discard("b")
        return fired

    assert _run(main()) == []


def test_an_expiry_may_end_other_calls() -> None:
    """expire() runs with the expired entries already gone: it may discard any key."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[str] = []

        def first() -> None:
            fired.append("first")
            deadlines.discard("first")
            deadlines.discard("other")

        deadlines.add(loop, "first", 0.01, first)
        deadlines.add(loop, "other", 0.05, lambda: fired.append("other"))
        await asyncio.sleep(0.08)
        return fired

    assert _run(main()) == ["first"]
