"""Keep multi-MiB blocks in glibc's heap, as the daemon does at start.

glibc serves each allocation above its mmap threshold (128 KiB, growing dynamically up to
32 MiB) with a fresh ``mmap`` that is page-faulted in and unmapped again on free, so a 1 MiB
message pays page faults on every request. The values here must stay equal to the daemon's
(``service/pbd/memory/malloc.py``) so that the echo server, the ceiling, runs on the same
allocator settings; ``tests/unit/test_bench.py`` checks that.
"""

from __future__ import annotations

import ctypes
import ctypes.util

MIB = 1024 * 1024

# mallopt option numbers from <malloc.h>.
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

TUNING: dict[str, tuple[int, int]] = {
    "M_MMAP_THRESHOLD": (M_MMAP_THRESHOLD, 32 * MIB),
    "M_TRIM_THRESHOLD": (M_TRIM_THRESHOLD, 512 * MIB),
    "M_TOP_PAD": (M_TOP_PAD, 64 * MIB),
}


def describe() -> str:
    """One line naming each setting and its value, for report headers."""
    return ", ".join(f"{name}={value // MIB} MiB" for name, (_, value) in TUNING.items())


def apply_tuning() -> dict[str, bool]:
    """Apply :data:`TUNING` with ``mallopt``; which settings glibc accepted (none: no glibc)."""
    name = ctypes.util.find_library("c")
    if not name:
        return {}
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return {}
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return {key: mallopt(option, value) == 1 for key, (option, value) in TUNING.items()}
