"""pbd.fronts.loads: the front ends' connection counts in a memfd every one of them maps."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from pbd.fronts.loads import GONE, Loads, create_memfd


@contextlib.contextmanager
def views(count: int, *indexes: int) -> Iterator[list[Loads]]:
    """A memfd of ``count`` counts, seen by front ends ``indexes``; all closed after."""
    fd = create_memfd(count)
    opened: list[Loads] = []
    try:
        opened += [Loads(fd, count, index) for index in indexes]
        yield opened
    finally:
        for view in opened:
            view.close()
        os.close(fd)


def test_counts_are_shared_and_the_least_loaded_takes() -> None:
    with views(3, 0, 1, 2) as (first, second, third):
        second.publish(2)
        third.publish(5)
        # Front end 0 holds 3: front end 1 holds fewer, so 0 leaves new connections to it.
        assert not first.may_take(3)
        assert first.may_take(2)  # a tie takes
        assert second.may_take(2)
        assert not third.may_take(5)


def test_others_sums_the_other_front_ends_counts() -> None:
    with views(3, 0, 1, 2) as (first, second, third):
        second.publish(2)
        third.publish(5)
        first.publish(7)
        assert first.others() == 7
        assert second.others() == 12
        third.publish(6)  # front end 2 took one: the others see the sum move
        assert first.others() == 8


def test_a_gone_front_end_is_never_the_least_loaded() -> None:
    with views(2, 0, 1, 0) as (daemon, survivor, replacement):
        daemon.publish(0)
        assert not survivor.may_take(7)
        daemon.mark_gone(0)  # the daemon saw front end 0 exit
        assert survivor.may_take(7)
        replacement.publish(0)  # counts its own from its start
        assert not survivor.may_take(7)
        assert GONE > 1 << 60


def test_a_lone_front_end_always_takes() -> None:
    with views(1, 0) as (only,):
        assert only.may_take(1000)


def test_an_index_outside_the_counts_is_refused() -> None:
    with pytest.raises(ValueError, match="outside 0..1"), views(2, 2):
        pass
