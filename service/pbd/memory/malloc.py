"""glibc allocator tuning for processes that move multi-MiB tensors on many threads.

- By default every allocation over 128 KiB..32 MiB is a fresh ``mmap`` that is page-faulted in
  and unmapped on free: a 1 MiB tensor pays that on every request. Raising the mmap and trim
  thresholds lets the heap reuse those blocks (DESIGN.md measured 3x for 1 MiB echo).
- gRPC's threads each get their own malloc arena, and with trimming off each keeps its high
  water mark: two arenas cut the daemon's peak RSS under 8 x 1 MiB in flight from ~123 to
  ~104 MB at the same throughput (measured with ``MALLOC_ARENA_MAX``).

The bench's echo server applies the same table, so ratios compare like with like. The daemon
and the front ends apply it (a front end without it paid 230-340 page faults and 1-1.5 ms of
system time per 1 MiB request: glibc's own thresholds trimmed the heap after every call and
grew it again for the next); the workers do not, their process is the model's.

A heap that keeps what it freed keeps a flood's memory too: :class:`FloodTrim` gives it back
once the process is idle.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger("pbd.memory")

MIB = 1024 * 1024
# FloodTrim: after this many bytes of requests, the heap is trimmed once the process is idle
# (nothing held and no request for TRIM_IDLE_S), and once more TRIM_AGAIN_S later.
TRIM_AFTER_BYTES = 32 * MIB
TRIM_IDLE_S = 1.0
TRIM_AGAIN_S = 5.0
# name -> (mallopt option, value)
TUNING: dict[str, tuple[int, int]] = {
    # 32 MiB: glibc documents it as the largest mmap threshold on 64-bit; covers 16 MiB tensors.
    "M_MMAP_THRESHOLD": (-3, 32 * MIB),
    "M_TRIM_THRESHOLD": (-1, 512 * MIB),
    "M_TOP_PAD": (-2, 64 * MIB),
    "M_ARENA_MAX": (-8, 2),
}


def describe() -> str:
    return ", ".join(
        f"{name}={value // MIB} MiB" if value >= MIB else f"{name}={value}"
        for name, (_, value) in TUNING.items()
    )


def tune_malloc() -> dict[str, bool]:
    """Apply :data:`TUNING` with ``mallopt``: which settings glibc accepted (none: no glibc)."""
    name = ctypes.util.find_library("c")
    if not name:
        return {}
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return {}
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    accepted = {key: mallopt(option, value) == 1 for key, (option, value) in TUNING.items()}
    refused = [key for key, ok in accepted.items() if not ok]
    if refused:
        log.warning("mallopt refused: %s", ", ".join(refused))
    return accepted


def trim_heap() -> None:
    """Give freed heap back to the system (``malloc_trim(0)``); nothing without glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class FloodTrim:
    """Gives a flood's heap back once the process is idle: after ``TRIM_AFTER_BYTES`` of
    requests came (``came``), it looks every ``TRIM_IDLE_S``; once nothing is held (``busy``
    is false) and no request came since it last looked, the heap is trimmed, off the event
    loop, and once more ``TRIM_AGAIN_S`` later if still idle (gRPC frees some of a flood's
    buffers only after its calls ended). A busy process is never trimmed: the heap it keeps
    is what makes large requests fast."""

    __slots__ = ("busy", "received", "count", "timer")

    def __init__(self, busy: Callable[[], bool]) -> None:
        self.busy = busy
        self.received = 0  # bytes of requests since the heap was last trimmed
        self.count = 0  # requests, so a look sees whether any came since the last
        self.timer: asyncio.TimerHandle | None = None

    def came(self, nbytes: int) -> None:
        """A request of ``nbytes`` came (taken or refused)."""
        self.received += nbytes
        self.count += 1
        if self.received >= TRIM_AFTER_BYTES and self.timer is None:
            self._look_later(TRIM_IDLE_S, True)

    def _look_later(self, delay: float, again: bool) -> None:
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(delay, self._look, self.count, again)

    def _look(self, count: int, again: bool) -> None:
        self.timer = None
        if self.busy() or self.count != count:  # busy: look again later
            self._look_later(TRIM_IDLE_S, again)
            return
        self.received = 0
        asyncio.get_running_loop().run_in_executor(None, trim_heap)
        if again:
            self._look_later(TRIM_AGAIN_S, False)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
