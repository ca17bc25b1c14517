"""Unpack a packed Python environment (a tar archive, as conda-pack makes) without trusting it.

Every member is checked before anything is written: no absolute names, no ``..`` component,
no link whose target leaves the environment, nothing but files, directories and links (no
devices, FIFOs). Then tarfile's own ``data`` filter extracts it (a second line of defence that
also drops setuid bits). The archive goes into a fresh directory beside the destination that is
renamed into place when complete, so a crash mid-way never leaves a half environment that looks
usable. The archive is read twice (checking, then extracting); how far it got is reported every
``PROGRESS_INTERVAL_S`` while that goes on, however large the archive.
"""

from __future__ import annotations

import io
import os
import posixpath
import secrets
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# An archive of a plain venv: its bin/python links to the interpreter of the machine that
# made it. Following such a link out of the archive is what the checks exist to refuse (and
# the interpreter need not exist here), so say what works instead.
_VENV_HINT = (
    ". This archive looks like a packed plain venv, whose interpreter is a link to the "
    "machine that made it: pack a relocatable environment with conda-pack "
    "(`conda pack -p <env> -o env.tar.gz`), or set EXECUTION_ENV_PATH to the venv's "
    "directory instead of an archive of it"
)


# Seconds between two progress reports of one unpacking.
PROGRESS_INTERVAL_S = 2.0


class UnsafeArchive(ValueError):
    """The archive would write outside its directory, or holds a kind of file it must not."""


def check_member(member: tarfile.TarInfo) -> None:
    """Raise :class:`UnsafeArchive` naming ``member`` if extracting it is unsafe."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name):
        raise UnsafeArchive(f"member '{name}' has an absolute path")
    if ".." in name.split("/"):
        raise UnsafeArchive(f"member '{name}' has a '..' component and would leave the archive")
    if member.issym():
        target = member.linkname
        if posixpath.isabs(target):
            raise UnsafeArchive(
                f"symbolic link '{name}' points to an absolute path '{target}'"
                + (_VENV_HINT if posixpath.basename(name).startswith("python") else "")
            )
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchive(f"symbolic link '{name}' -> '{target}' leaves the archive")
    elif member.islnk():
        target = posixpath.normpath(member.linkname)
        if posixpath.isabs(target) or target == ".." or target.startswith("../"):
            raise UnsafeArchive(f"hard link '{name}' -> '{member.linkname}' leaves the archive")
    elif not (member.isfile() or member.isdir()):
        raise UnsafeArchive(f"member '{name}' is a device, FIFO or other special file")


@dataclass(frozen=True)
class Progress:
    """How far an unpacking got. Both passes read the whole archive; ``read`` counts the
    (compressed) bytes of this pass."""

    extracting: bool  # False: the first pass, checking every member
    read: int
    size: int  # of the archive file
    members: int  # checked so far, or extracted so far
    members_total: int  # known once checked (0 before)

    @property
    def percent(self) -> int:
        """Of both passes together."""
        if self.size <= 0:
            return 100
        return min(100, 100 * (self.size * self.extracting + self.read) // (2 * self.size))

    def describe(self) -> str:
        read = f"{_mb(self.read)} of {_mb(self.size)} read"
        if not self.extracting:
            return f"{self.percent}%, checking members ({self.members} so far, {read})"
        done = f"{self.members} of {self.members_total} members"
        return f"{self.percent}%, extracting ({done}, {read})"


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


class _WatchedFile(io.FileIO):
    """The archive file as tarfile (and its decompressor) reads it: each read may report."""

    def __init__(self, path: Path, report: Callable[[Progress], None]) -> None:
        super().__init__(path, "rb")
        self.size = os.fstat(self.fileno()).st_size
        self.report = report
        self.extracting = False
        self.members = self.members_total = 0
        self._due = time.monotonic() + PROGRESS_INTERVAL_S

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        now = time.monotonic()
        if now >= self._due:
            self._due = now + PROGRESS_INTERVAL_S
            self.report(
                Progress(self.extracting, self.tell(), self.size, self.members, self.members_total)
            )
        return data

    def extracting_all(self, members: list[tarfile.TarInfo]) -> Iterator[tarfile.TarInfo]:
        """``members`` for extractall, counting those extracted."""
        self.extracting, self.members, self.members_total = True, 0, len(members)
        for member in members:
            yield member
            self.members += 1


def extract_archive(
    archive: Path, destination: Path, progress: Callable[[Progress], None] | None = None
) -> int:
    """Unpack ``archive`` (tar, optionally gzip/bz2/xz) as directory ``destination``, which
    must not exist yet; how many members it had. ``progress`` is called every
    ``PROGRESS_INTERVAL_S`` while it runs. Raises :class:`UnsafeArchive`, or
    ``tarfile.TarError``/``OSError``."""
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = destination.with_name(f".{destination.name}.{secrets.token_hex(4)}.partial")
    try:
        with (
            _WatchedFile(archive, progress or (lambda _: None)) as raw,
            tarfile.open(fileobj=raw, mode="r:*") as tar,
        ):
            members = []
            for member in tar:
                check_member(member)
                members.append(member)
                raw.members = len(members)
            staging.mkdir(mode=0o700)
            tar.extractall(staging, members=raw.extracting_all(members), filter="data")
        os.rename(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return len(members)
