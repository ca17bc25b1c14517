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
        await asyncio.sleep(0.08)  # however late the loop runs the timer, the order holds
        return fired

    assert _run(main()) == ["early", "middle", "late"]


def test_calls_that_end_in_time_never_expire() -> None:
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


def test_one_call_at_a_time_arms_one_timer_per_timeout_not_one_per_call() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        armed = 0
        real_call_at = loop.call_at

        def counting_call_at(when, callback, *args):  # type: ignore[no-untyped-def]
            nonlocal armed
            armed += 1
            return real_call_at(when, callback, *args)

        loop.call_at = counting_call_at  # type: ignore[method-assign]
        try:
            for i in range(50):
                deadlines.add(loop, i, 30.0, lambda: None)
                deadlines.discard(i)
        finally:
            del loop.call_at  # type: ignore[method-assign]
        return armed

    assert _run(main()) == 1
