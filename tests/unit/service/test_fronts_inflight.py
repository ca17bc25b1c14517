"""The front ends' in-flight counts at scaled instances: one memfd, written by each front end
in its own row, summed by the daemon."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pbd.fronts.inflight import SLOTS, InflightTable, Slots, create_memfd


@pytest.fixture
def fd() -> int:
    made = create_memfd(3)
    yield made
    os.close(made)


def test_each_front_ends_count_adds_up_at_the_daemon(fd: int) -> None:
    daemon, front1, front2 = (InflightTable(fd, 3) for _ in range(3))
    front1.publish(1, 5, 3)
    front2.publish(2, 5, 4)
    front2.publish(2, 6, 1)
    assert daemon.at(5) == 7 and daemon.at(6) == 1 and daemon.at(7) == 0
    front1.publish(1, 5, 0)
    assert daemon.at(5) == 4
    for table in (daemon, front1, front2):
        table.close()


def test_slot_zero_and_slots_past_the_table_are_never_written(fd: int) -> None:
    table = InflightTable(fd, 3)
    table.publish(0, 0, 9)
    table.publish(0, SLOTS, 9)
    assert table.at(0) == 0 and table.at(SLOTS) == 0
    assert sum(table.at(slot) for slot in range(1, SLOTS)) == 0
    table.close()


def test_a_front_end_process_writes_what_the_daemon_reads(fd: int) -> None:
    """A real second process with the descriptor, as a front end gets it."""
    child = (
        "import sys; from pbd.fronts.inflight import InflightTable;"
        "t = InflightTable(int(sys.argv[1]), 3); t.publish(2, 11, 42); t.close()"
    )
    subprocess.run([sys.executable, "-c", child, str(fd)], check=True, pass_fds=[fd])
    table = InflightTable(fd, 3)
    assert table.at(11) == 42
    table.close()


def test_a_slot_given_out_again_starts_at_zero(fd: int) -> None:
    table = InflightTable(fd, 3)
    slots = Slots(table)
    first = slots.slot_of(100)
    assert first == 1 and slots.slot_of(100) == first  # the same instance, the same slot
    assert slots.slot_of(200) == 2
    table.publish(1, first, 5)  # a front end's count left from the instance that went
    assert slots.count(100) == 5
    slots.release(100)
    assert slots.count(100) == 0
    again = slots.slot_of(300)
    assert again == first and slots.count(300) == 0
    table.close()


def test_when_every_slot_is_taken_an_instance_is_not_counted(fd: int) -> None:
    table = InflightTable(fd, 3)
    slots = Slots(table)
    given = {slots.slot_of(key) for key in range(SLOTS - 1)}
    assert given == set(range(1, SLOTS))
    assert slots.slot_of(10**9) == 0 and slots.count(10**9) == 0
    table.close()
