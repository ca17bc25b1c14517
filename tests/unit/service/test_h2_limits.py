"""pbd.h2.limits: a budget counts events and reads the clock only when its count runs out."""

from __future__ import annotations

from pbd.h2.limits import Budget, Rate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_a_budget_allows_its_count_in_a_window_then_refuses() -> None:
    clock = Clock()
    budget = Budget(Rate(3, 10.0), clock())
    assert [budget.spend(clock) for _ in range(4)] == [True, True, True, False]
    clock.now = 9.9
    assert not budget.spend(clock)
    clock.now = 10.0  # the window ran out: a new one starts at this event
    assert [budget.spend(clock) for _ in range(4)] == [True, True, True, False]


def test_the_clock_is_read_only_when_the_count_runs_out() -> None:
    clock = Clock()
    budget = Budget(Rate(100, 1.0), clock())
    clock.reads = 0
    for _ in range(100):
        budget.spend(clock)
    assert clock.reads == 0
    budget.spend(clock)
    assert clock.reads == 1


def test_slow_events_never_run_out() -> None:
    clock = Clock()
    budget = Budget(Rate(2, 1.0), clock())
    for second in range(100):
        clock.now = float(second)
        assert budget.spend(clock)
