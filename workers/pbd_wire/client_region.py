"""A client's registered system shared-memory region: how it is named to a worker and how
either side opens it without being led somewhere else.

The daemon opens a key once, at registration, and records the file's identity (device and
inode). Workers are told ``<file>#<generation>:<device>:<inode>`` and open the file again
themselves; they accept only the very file the daemon registered, so a key swapped after
registration (for a symbolic link, a hard link or another file) is refused, not followed.

Opening never follows a symbolic link (``O_NOFOLLOW``), never blocks on a FIFO
(``O_NONBLOCK``), and accepts only a regular file with a single link that sits directly in the
shared-memory directory: a key is one file name, never ``.``, ``..`` or a path.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from dataclasses import dataclass

_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class RegionRefused(Exception):
    """The file is not one a client may register (or not the one it registered); the message
    says why."""


@dataclass(frozen=True)
class RegionIdentity:
    """One registration of a client's file, as the worker is told it."""

    file: str
    generation: int
    device: int
    inode: int

    @functools.cached_property
    def worker_name(self) -> str:  # asked for every request that names the region
        return f"{self.file}#{self.generation}:{self.device}:{self.inode}"

    @classmethod
    def parse(cls, name: str) -> RegionIdentity | None:
        """The identity in a worker-side name; ``None`` for a name without ``#`` (a daemon's
        own segment)."""
        file, sep, rest = name.partition("#")
        if not sep:
            return None
        try:
            generation, device, inode = (int(part) for part in rest.split(":"))
        except ValueError:
            raise RegionRefused(f"malformed client region name {name!r}") from None
        return cls(file, generation, device, inode)


def check_file_name(file: str) -> None:
    """A key's file name: one name in the directory, nothing that walks out of it."""
    if not file or file in (".", "..") or "/" in file or "\0" in file or "#" in file:
        raise RegionRefused("not a single file name in the shared-memory directory")


def open_region(
    shm_dir: str,
    file: str,
    *,
    owner_uid: int | None = None,
    identity: RegionIdentity | None = None,
) -> tuple[int, os.stat_result]:
    """An open descriptor of ``shm_dir/file`` and its status. Refuses a symbolic link, anything
    but a regular file with one link, a file not owned by ``owner_uid`` (when given), and a file
    other than ``identity``'s (when given). The caller closes the descriptor."""
    check_file_name(file)
    try:
        fd = os.open(os.path.join(shm_dir, file), _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RegionRefused("a symbolic link") from None
        raise RegionRefused((exc.strerror or str(exc)).lower()) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RegionRefused("not a regular file")
        if st.st_nlink != 1:
            raise RegionRefused(f"the file has {st.st_nlink} links, a client's segment has one")
        if owner_uid is not None and st.st_uid != owner_uid:
            raise RegionRefused(
                f"owned by uid {st.st_uid}; only segments owned by uid {owner_uid} (the server's) "
                "may be registered"
            )
        if identity is not None and (st.st_dev, st.st_ino) != (identity.device, identity.inode):
            raise RegionRefused("the file was replaced after it was registered")
    except BaseException:
        os.close(fd)
        raise
    return fd, st
