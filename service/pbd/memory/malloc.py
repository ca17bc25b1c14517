"""glibc allocator tuning for processes that move multi-MiB tensors on many threads.

- By default every allocation over 128 KiB..32 MiB is a fresh ``mmap`` that is page-faulted in
  and unmapped on free: a 1 MiB tensor pays that on every request. Raising the mmap and trim
  thresholds lets the heap reuse those blocks (DESIGN.md measured 3x for 1 MiB echo).
- gRPC's threads each get their own malloc arena, and with trimming off each keeps its high
  water mark: two arenas cut the daemon's peak RSS under 8 x 1 MiB in flight from ~123 to
  ~104 MB at the same throughput (measured with ``MALLOC_ARENA_MAX``).

The bench's echo server applies the same table, so ratios compare like with like.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("pbd.memory")

MIB = 1024 * 1024
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
