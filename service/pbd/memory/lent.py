"""Front ends' arenas, as the daemon maps them (``pbd serve --frontends``).

A front end copies each request's input bytes once into its own shared-memory arena and the
daemon passes the worker their descriptors; the daemon maps those segments too (validation
reads BYTES elements, and an output a model returns in place is one of them). One map per
front end, by the name base its arena's segments start with; a front end that goes away is
forgotten with all its mappings.
"""

from __future__ import annotations

from pbd_wire.shm import SegmentMap

_BY_BASE: dict[str, SegmentMap] = {}


def lend(base: str, shm_dir: str) -> SegmentMap:
    """The map of the arena whose segments are named ``<base>...``."""
    segments = _BY_BASE.get(base)
    if segments is None:
        segments = _BY_BASE[base] = SegmentMap(shm_dir, allowed_prefix=base)
    return segments


def forget(base: str) -> None:
    segments = _BY_BASE.pop(base, None)
    if segments is not None:
        segments.close()


def view(region: str, offset: int, nbytes: int) -> memoryview | None:
    """A view of a lent segment; None when ``region`` is no front end's."""
    for base, segments in _BY_BASE.items():
        if region.startswith(base):
            return segments.view(region, offset, nbytes)
    return None
