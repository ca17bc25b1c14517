"""How many connections each front end holds, in a small shared memory every front end maps
(a memfd the daemon makes and passes on): what lets a front end leave a new connection to a
less loaded one.

Every front end waiting on the public sockets is woken by a new connection; one that holds
more connections than the least loaded of the others leaves it to them for ``DEFER_S``,
again while they take connections, and takes it if they took none meanwhile
(``pbd.listeners.OneByOne``): connections opened at once spread evenly, and one front end
stopped or stuck costs a new connection about ``DEFER_S``. Each front end publishes its count
when it is woken and after each accept. One
signed 64-bit count per front end; the daemon marks a front end that exited ``GONE`` until
its replacement writes its own count.
"""

from __future__ import annotations

import mmap
import os

SLOT_BYTES = 8
GONE = 1 << 62  # a front end that exited: never the least loaded
DEFER_S = 0.010  # how long a loaded front end leaves a connection to the others


def create_memfd(count: int) -> int:
    """A new memfd holding ``count`` counts (all 0), for the daemon to pass to front ends."""
    fd = os.memfd_create("pbd-front-loads", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, count * SLOT_BYTES)
    except OSError:
        os.close(fd)
        raise
    return fd


class Loads:
    """The counts in the memfd ``fd``, as front end ``index`` of ``count`` sees them."""

    def __init__(self, fd: int, count: int, index: int) -> None:
        if not 0 <= index < count:
            raise ValueError(f"front end index {index} outside 0..{count - 1}")
        self.count = count
        self.index = index
        self._map = mmap.mmap(fd, count * SLOT_BYTES)
        self._counts = memoryview(self._map).cast("q")

    def publish(self, held: int) -> None:
        self._counts[self.index] = held

    def mark_gone(self, index: int) -> None:
        self._counts[index] = GONE

    def may_take(self, held: int) -> bool:
        """Publish ``held`` (this front end's connections); whether no other front end holds
        fewer, so that a new connection is this one's to take now."""
        self.publish(held)
        counts = self._counts
        for other in range(self.count):
            if other != self.index and counts[other] < held:
                return False
        return True

    def others(self) -> int:
        """The connections the other front ends hold, as they last published them (a front
        end that exited counts ``GONE``)."""
        counts = self._counts
        return sum(counts[other] for other in range(self.count) if other != self.index)

    def close(self) -> None:
        self._counts.release()
        self._map.close()
