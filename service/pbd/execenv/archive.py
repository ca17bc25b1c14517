"""Unpack a packed Python environment (a tar archive, as conda-pack makes) without trusting it.

Every member is checked before anything is written: no absolute names, no ``..`` component,
no link whose target leaves the environment, nothing but files, directories and links (no
devices, FIFOs). Then tarfile's own ``data`` filter extracts it (a second line of defence that
also drops setuid bits). The archive goes into a fresh directory beside the destination that is
renamed into place when complete, so a crash mid-way never leaves a half environment that looks
usable.
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shutil
import tarfile
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


def extract_archive(archive: Path, destination: Path) -> None:
    """Unpack ``archive`` (tar, optionally gzip/bz2/xz) as directory ``destination``, which
    must not exist yet. Raises :class:`UnsafeArchive`, or ``tarfile.TarError``/``OSError``."""
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = destination.with_name(f".{destination.name}.{secrets.token_hex(4)}.partial")
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                check_member(member)
            staging.mkdir(mode=0o700)
            tar.extractall(staging, members=members, filter="data")
        os.rename(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
