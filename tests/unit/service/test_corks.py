"""pbd.corks: writes held to the end of a block, one write per writer, the outermost block
writing."""

from __future__ import annotations

from pbd.corks import BLOCKS, begin, corked, end, hold


class Writer:
    """A writer as ``Sender`` and ``DirectLink`` are: keeps inside a block, writes outside."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        if BLOCKS:
            if not self.kept:
                hold(self)
            self.kept.append(data)
        else:
            self.writes.append(data)

    def uncork(self) -> None:
        kept, self.kept = self.kept, []
        self.writes.append(b"".join(kept))


def test_a_block_holds_each_writers_writes_to_its_end_then_one_write_each() -> None:
    one, two = Writer(), Writer()
    with corked():
        one.write(b"a")
        two.write(b"x")
        one.write(b"b")
        assert one.writes == two.writes == []
    assert (one.writes, two.writes) == ([b"ab"], [b"x"])
    one.write(b"c")  # no block: at once
    assert one.writes == [b"ab", b"c"]
    assert BLOCKS == []


def test_the_outermost_block_writes_and_begin_inside_one_returns_none() -> None:
    writer = Writer()
    outer = begin()
    assert outer is not None
    inner = begin()
    assert inner is None
    writer.write(b"in")
    end(inner)
    assert writer.writes == []
    writer.write(b"out")
    end(outer)
    assert writer.writes == [b"inout"] and BLOCKS == []


def test_a_block_left_by_an_exception_still_writes() -> None:
    writer = Writer()
    try:
        with corked():
            writer.write(b"kept")
            raise RuntimeError("handler failed")
    except RuntimeError:
        pass
    assert writer.writes == [b"kept"] and BLOCKS == []
