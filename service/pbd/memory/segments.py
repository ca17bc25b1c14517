"""Naming of this daemon's /dev/shm segments, and removal of those a dead daemon left.

Every segment is ``<prefix>-<daemon pid>x<random>-<instance seq>-<d|w><n>``: the pid tells a
starting daemon whether the owner of a segment is still alive.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
from collections.abc import Callable

from pbd_wire.shm import SHM_DIR

log = logging.getLogger("pbd.memory")


# The shape of every segment a pbd daemon or its workers create, whatever the prefix.
_ANY_DAEMON_SEGMENT = re.compile(r"-\d+x[0-9a-f]+-\d+-[dw]\d+$")


def is_daemon_segment(name: str, prefix: str) -> bool:
    """``name`` is under this daemon's ``prefix``, or has the shape of any pbd daemon's
    segment: a client may register neither (it would read other clients' tensors)."""
    return name.startswith(f"{prefix}-") or _ANY_DAEMON_SEGMENT.search(name) is not None


def new_daemon_id() -> str:
    return f"{os.getpid()}x{secrets.token_hex(3)}"


def segment_namer(prefix: str, daemon_id: str) -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}-{daemon_id}-{next(counter)}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_segments(
    prefix: str, *, daemon_id: str | None = None, shm_dir: str = SHM_DIR
) -> list[str]:
    """Unlink segments of ``daemon_id``, or (``None``) of every daemon that is no longer alive."""
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)x[0-9a-f]+-")
    removed: list[str] = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match is None:
            continue
        if daemon_id is not None:
            if not name.startswith(f"{prefix}-{daemon_id}-"):
                continue
        elif _pid_alive(int(match.group(1))):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed.append(name)
        except FileNotFoundError:
            pass
    if removed and daemon_id is None:
        log.warning("removed %d stale shared-memory segments of dead daemons", len(removed))
    return removed
