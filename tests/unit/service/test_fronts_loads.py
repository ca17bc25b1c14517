"""pbd.fronts.loads: the front ends' connection counts in a memfd every one of them maps."""

from __future__ import annotations

import os

import pytest

from pbd.fronts.loads import GONE, Loads, create


def test_counts_are_shared_and_the_least_loaded_takes() -> None:
    fd = create(3)
    try:
        views = [Loads(fd, 3, index) for index in range(3)]
        views[1].publish(2)
        views[2].publish(5)
        # Front end 0 holds 3: front end 1 holds fewer, so 0 leaves new connections to it.
        assert not views[0].may_take(3)
        assert views[0].may_take(2)  # a tie takes
        assert views[1].may_take(2)
        assert not views[2].may_take(5)
        for view in views:
            view.close()
    finally:
        os.close(fd)


def test_a_gone_front_end_is_never_the_least_loaded() -> None:
    fd = create(2)
    try:
        daemon, survivor = Loads(fd, 2, 0), Loads(fd, 2, 1)
        daemon.publish(0)
        assert not survivor.may_take(7)
        daemon.mark_gone(0)  # the daemon saw front end 0 exit
        assert survivor.may_take(7)
        replacement = Loads(fd, 2, 0)
        replacement.publish(0)  # counts its own from its start
        assert not survivor.may_take(7)
        for view in (daemon, survivor, replacement):
            view.close()
        assert GONE > 1 << 60
    finally:
        os.close(fd)


def test_a_lone_front_end_always_takes() -> None:
    fd = create(1)
    try:
        only = Loads(fd, 1, 0)
        assert only.may_take(1000)
        only.close()
    finally:
        os.close(fd)


def test_an_index_outside_the_counts_is_refused() -> None:
    fd = create(2)
    try:
        with pytest.raises(ValueError, match="outside 0..1"):
            Loads(fd, 2, 2)
    finally:
        os.close(fd)
