"""What each front end has in flight at each instance's worker, in a small shared memory the
daemon makes and every front end maps (a memfd passed on, as ``pbd.fronts.loads``'s).

A version whose instances are scaled with load (``pbd.version.scaler``) samples its load every
50 ms: the requests waiting in its queue and running in its workers. Its requests that front
ends send straight to workers never pass the daemon, so each front end writes, for each such
instance, how many of its requests are there now (sent, not answered), whenever that changes;
the scaler adds them up without a message. A slot is one instance: the daemon gives each
instance of a scaled version one (``DirectInstance.load_slot``; 0 is none, for every other
instance, whose front ends then write nothing) and zeroes its row before it gives it out again.
One signed 64-bit count per (front end, slot).
"""

from __future__ import annotations

import mmap
import os

SLOTS = 4096  # instances of scaled versions at once; past it an instance is not counted
SLOT_BYTES = 8


def create_memfd(fronts: int) -> int:
    """A new memfd of ``fronts`` rows of ``SLOTS`` counts (all 0), for the daemon to pass on."""
    fd = os.memfd_create("pbd-front-inflight", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, fronts * SLOTS * SLOT_BYTES)
    except OSError:
        os.close(fd)
        raise
    return fd


class InflightTable:
    """The counts in the memfd ``fd`` of ``fronts`` front ends."""

    def __init__(self, fd: int, fronts: int) -> None:
        self.fronts = fronts
        self._map = mmap.mmap(fd, fronts * SLOTS * SLOT_BYTES)
        self._counts = memoryview(self._map).cast("q")

    def publish(self, front: int, slot: int, count: int) -> None:
        """Front end ``front`` has ``count`` requests at the instance of ``slot`` now."""
        if 0 < slot < SLOTS:
            self._counts[front * SLOTS + slot] = count

    def at(self, slot: int) -> int:
        """What every front end has at the instance of ``slot``, as they last wrote it."""
        if not 0 < slot < SLOTS:
            return 0
        counts = self._counts
        return sum(counts[front * SLOTS + slot] for front in range(self.fronts))

    def clear(self, slot: int) -> None:
        """Zero ``slot`` for every front end (the daemon, before giving it out again)."""
        if 0 < slot < SLOTS:
            for front in range(self.fronts):
                self._counts[front * SLOTS + slot] = 0

    def close(self) -> None:
        self._counts.release()
        self._map.close()


class Slots:
    """The daemon's side: which slot each instance has, and the free ones."""

    def __init__(self, table: InflightTable) -> None:
        self.table = table
        self._by_instance: dict[int, int] = {}  # id(instance) -> slot
        self._free = list(range(SLOTS - 1, 0, -1))  # 1 first

    def slot_of(self, key: int) -> int:
        """The slot of the instance ``key`` (its id()), given out now if it has none; 0 when
        every slot is taken."""
        slot = self._by_instance.get(key)
        if slot is None:
            if not self._free:
                return 0
            slot = self._free.pop()
            self.table.clear(slot)
            self._by_instance[key] = slot
        return slot

    def release(self, key: int) -> None:
        slot = self._by_instance.pop(key, None)
        if slot is not None:
            self._free.append(slot)

    def count(self, key: int) -> int:
        slot = self._by_instance.get(key)
        return self.table.at(slot) if slot is not None else 0
