"""Writes held to the end of a block of work: one write per writer.

A reader that hands on several messages at once makes writes to several connections: a
worker's frames of several streams become HTTP/2 frames to their clients; a client's read of
several requests becomes an Execute frame to a worker each. Inside a block (``corked()``, or
``begin``/``end`` where a generator's cost per read counts) a writer keeps what it is given
and registers once (``hold``); at the block's end each writer's ``uncork`` writes what it
kept, in one write. Outside a block a writer writes at once.

Blocks nest: an inner one leaves the writing to the outermost. ``BLOCKS`` is the stack of
open blocks (tested for emptiness on each write: keep the list, never rebind it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol


class Corked(Protocol):
    def uncork(self) -> None:
        """The end of the block: write what was kept in it, in one write."""
        ...


# The writers held in each open block, the innermost last.
BLOCKS: list[list[Corked]] = []


def hold(writer: Corked) -> None:
    """``writer`` keeps its writes until the open block ends (call it once per block, the
    first time the writer keeps something; a block must be open)."""
    BLOCKS[-1].append(writer)


def begin() -> list[Corked] | None:
    """Open a block; None when one is open already (the outer one writes)."""
    if BLOCKS:
        return None
    held: list[Corked] = []
    BLOCKS.append(held)
    return held


def end(held: list[Corked] | None) -> None:
    """Close the block ``begin`` opened (nothing for its None): each writer writes."""
    if held is None:
        return
    BLOCKS.pop()
    for writer in held:
        writer.uncork()


@contextlib.contextmanager
def corked() -> Iterator[None]:
    """A block: what writers write in it leaves at its end, one write a writer."""
    held = begin()
    try:
        yield
    finally:
        end(held)
