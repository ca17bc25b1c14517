"""The BLS wait graph: which calls can never run, and which must be left to queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pbd.bls.wait_graph import WaitGraph


def run(body: Callable[[], None]) -> None:
    async def main() -> None:
        body()

    asyncio.run(main())


def graph(instances: dict[str, list[str]]) -> WaitGraph:
    return WaitGraph(lambda model: instances.get(model, []))


def refused(*waiters: object) -> list[bool]:
    return [w.refused.done() for w in waiters]  # type: ignore[attr-defined]


def test_a_model_calling_itself_with_one_instance_is_refused() -> None:
    def body() -> None:
        g = graph({"m": ["m0"]})
        call = g.add_call("m0", "m", [])
        g.check()
        assert refused(call) == [True]
        assert "BLS request to model 'm' can never run" in call.refused.result().message

    run(body)


def test_a_call_to_a_free_instance_queues() -> None:
    def body() -> None:
        g = graph({"m": ["m0", "m1"], "x": ["x0"]})
        first = g.add_call("m0", "m", [])
        other = g.add_call("x0", "m", [])  # m1 is free: both can wait
        g.check()
        assert refused(first, other) == [False, False]

    run(body)


def test_a_cycle_refuses_the_call_that_closed_it() -> None:
    def body() -> None:
        g = graph({"a": ["a0"], "b": ["b0"]})
        a_to_b = g.add_call("a0", "b", [])
        g.check()
        b_to_a = g.add_call("b0", "a", [a_to_b.gid])  # b0 runs a_to_b
        g.check()
        assert refused(a_to_b, b_to_a) == [False, True]

    run(body)


def test_every_instance_waiting_on_its_own_model_refuses_only_the_newest() -> None:
    def body() -> None:
        g = graph({"m": ["m0", "m1"]})
        first = g.add_call("m0", "m", [])
        g.check()
        second = g.add_call("m1", "m", [])
        g.check()
        assert refused(first, second) == [False, True]
        g.remove_call(second)  # its caller got the error and returns: m1 frees up
        g.check()
        assert refused(first) == [False]

    run(body)


def test_a_hosted_call_progresses_with_its_host() -> None:
    def body() -> None:
        g = graph({"m": ["m0", "m1"], "leaf": ["l0"]})
        top = g.add_call("m0", "m", [])  # runs on m1, which calls leaf (free)
        leaf = g.add_call("m1", "leaf", [top.gid])
        g.check()
        assert refused(top, leaf) == [False, False]
        assert g.stuck() == set()

    run(body)


def test_a_model_without_instances_is_not_a_deadlock() -> None:
    def body() -> None:
        g = graph({})
        call = g.add_call("m0", "loading", [])
        g.check()
        assert refused(call) == [False]

    run(body)
