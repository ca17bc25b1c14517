"""pbd.h2.sending: ``corked()``, what connections write while a reader hands on a burst."""

from __future__ import annotations

from pbd.corks import corked
from pbd.h2.sending import Sender


class Wire:
    """A connection's sink: each call is one write."""

    def __init__(self, sender: Sender) -> None:
        self.writes: list[list[bytes]] = []
        sender.sink = lambda data: self.writes.append([bytes(data)])
        sender.sink_parts = lambda parts: self.writes.append([bytes(p) for p in parts])


def test_outside_a_cork_each_write_leaves_at_once() -> None:
    sender = Sender()
    wire = Wire(sender)
    sender.write(b"a")
    sender.write(b"b")
    assert wire.writes == [[b"a"], [b"b"]]


def test_writes_in_a_cork_leave_at_its_end_one_write_a_connection_in_order() -> None:
    one, two = Sender(), Sender()
    wire_one, wire_two = Wire(one), Wire(two)
    with corked():
        one.write(b"1a")
        two.write(b"2a")
        one.write_parts([b"1b", b"1c"])
        two.write(b"2b")
        assert wire_one.writes == wire_two.writes == []
    assert wire_one.writes == [[b"1a", b"1b", b"1c"]]
    assert wire_two.writes == [[b"2a", b"2b"]]
    one.write(b"after")  # the cork is gone
    assert wire_one.writes[-1] == [b"after"]


def test_a_nested_cork_leaves_the_sending_to_the_outer_one() -> None:
    sender = Sender()
    wire = Wire(sender)
    with corked():
        with corked():
            sender.write(b"inner")
        assert wire.writes == []
        sender.write(b"outer")
    assert wire.writes == [[b"inner", b"outer"]]


def test_a_connection_that_failed_in_the_cork_sends_nothing() -> None:
    sender = Sender()
    wire = Wire(sender)
    with corked():
        sender.write(b"lost")
        sender.failed = True
    assert wire.writes == []
    assert sender.take_out() == []
