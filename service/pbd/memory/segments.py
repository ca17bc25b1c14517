"""Naming of this daemon's /dev/shm segments, its claim on them, and removal of those a dead
daemon left.

Every segment is ``<prefix>-<daemon id>-<instance seq>-<d|w><n>`` (or ``-c``), the daemon id
being ``<pid>x<random>``. The pid alone cannot tell whether the owner lives (daemons in
containers sharing /dev/shm have PID namespaces of their own), so a daemon claims its
segments with an owner record (``pbd_wire.shm_owner``), and a starting daemon removes a
daemon id's segments only when it can take that record's lock. Segments with no record at all
(a pbd from before owner records, or a record someone deleted) are left in place and
reported, never guessed about.

Cost: one file and one lock per daemon at start, nothing per segment.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import secrets
from collections.abc import Callable

from pbd_wire.shm import SHM_DIR, unlink_starting
from pbd_wire.shm_owner import OWNER_SUFFIX, owner_path, owner_record, try_lock

log = logging.getLogger("pbd.memory")

_DAEMON_ID = r"\d+x[0-9a-f]+"
# The shape of every segment or owner record a pbd daemon or its workers create, whatever the
# prefix.
_ANY_DAEMON_FILE = re.compile(rf"-{_DAEMON_ID}(-\d+-([dw]\d+|c)|{re.escape(OWNER_SUFFIX)})$")


def is_daemon_segment(name: str, prefix: str) -> bool:
    """``name`` is under this daemon's ``prefix``, or has the shape of any pbd daemon's
    segment or owner record: a client may register neither (it would read other clients'
    tensors, or drop a daemon's claim on its segments when it closed the file)."""
    return name.startswith(f"{prefix}-") or _ANY_DAEMON_FILE.search(name) is not None


def new_daemon_id() -> str:
    return f"{os.getpid()}x{secrets.token_hex(3)}"


def segment_namer(prefix: str, daemon_id: str) -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}-{daemon_id}-{next(counter)}"


class SegmentClaim:
    """This daemon's hold on its segments: its owner record, locked until ``release()``."""

    def __init__(self, prefix: str, daemon_id: str, shm_dir: str = SHM_DIR) -> None:
        """Write and lock the owner record, then remove what dead daemons with the same prefix
        left. OSError when the record cannot be written (``shm_dir`` missing or read-only: no
        segment could be made there either)."""
        self.prefix, self.daemon_id, self.shm_dir = prefix, daemon_id, shm_dir
        self.path = owner_path(f"{prefix}-{daemon_id}", shm_dir)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            if not try_lock(self._fd):  # a fresh file nobody else has opened
                raise OSError(errno.EAGAIN, f"cannot lock the owner record {self.path}")
            os.write(self._fd, owner_record().encode())
        except OSError:
            self.release()
            raise
        remove_dead_daemons_segments(prefix, shm_dir, own_id=daemon_id)

    def release(self) -> None:
        """Remove this daemon's segments, then its owner record (once)."""
        if self._fd < 0:
            return
        remove_segments(self.prefix, self.daemon_id, self.shm_dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = -1


def remove_segments(prefix: str, daemon_id: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink the segments of ``daemon_id`` (not its owner record); the names removed."""
    return unlink_starting(shm_dir, _names(shm_dir), f"{prefix}-{daemon_id}-")


def remove_dead_daemons_segments(
    prefix: str, shm_dir: str = SHM_DIR, *, own_id: str | None = None
) -> list[str]:
    """Unlink the segments and owner records of the daemons with this prefix whose owner
    record nobody holds (``own_id``, this daemon, is skipped); the names removed."""
    names = _names(shm_dir)
    segment = re.compile(rf"^{re.escape(prefix)}-({_DAEMON_ID})-")
    owner = re.compile(rf"^{re.escape(prefix)}-({_DAEMON_ID}){re.escape(OWNER_SUFFIX)}$")
    with_segments: set[str] = set()
    with_owner: set[str] = set()
    for name in names:
        if found := segment.match(name):
            with_segments.add(found.group(1))
        elif found := owner.match(name):
            with_owner.add(found.group(1))
    removed: list[str] = []
    for daemon_id in sorted(with_owner - {own_id}):
        removed += _remove_if_dead(prefix, daemon_id, shm_dir, names)
    if removed:
        log.warning(
            "removed %d stale shared-memory segments of dead daemons (their owner records "
            "were no longer locked)",
            len(removed),
        )
    ownerless = sorted(with_segments - with_owner - {own_id})
    if ownerless:
        log.warning(
            "left %d daemon(s)' shared-memory segments in %s without an owner record "
            "(%s-%s-*, ...): pbd cannot tell whether they live (a pbd from before owner "
            "records?); remove them by hand once no such daemon runs",
            len(ownerless),
            shm_dir,
            prefix,
            ownerless[0],
        )
    return removed


def _remove_if_dead(prefix: str, daemon_id: str, shm_dir: str, names: list[str]) -> list[str]:
    path = owner_path(f"{prefix}-{daemon_id}", shm_dir)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:  # its daemon just stopped and removed everything
        return []
    try:
        if not try_lock(fd):
            return []  # alive, in whatever PID namespace
        with open(fd, closefd=False) as record:
            who = " ".join(record.read().split())
        removed = unlink_starting(shm_dir, names, f"{prefix}-{daemon_id}-")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        log.info("daemon %s (%s) is gone: removed its %d segment(s)", daemon_id, who, len(removed))
        return removed
    finally:
        os.close(fd)  # after the unlink: no other daemon takes the lock of a record still there


def _names(shm_dir: str) -> list[str]:
    try:
        return os.listdir(shm_dir)
    except OSError:
        return []
