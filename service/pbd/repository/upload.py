"""Model upload: RepositoryModelLoad's ``file:<path>`` parameters, when ``--allow-model-upload``.

An upload becomes a fresh directory ``<uploads>/<random>/<model>`` (0700, the daemon's own)
holding exactly the files sent, and is loaded from there like a repository's model directory.
Every path is checked before a byte is written: relative, its parts neither empty, ``.`` nor
``..``, without NUL or backslash, a part at most 255 bytes and the whole at most 4096; the file
count and their bytes together are capped. Files are created with ``O_CREAT|O_EXCL|O_NOFOLLOW``
under directories opened with ``O_NOFOLLOW``, so nothing is written through a link even if one
appeared. The repository swaps the upload in only once it has loaded (a failed one is removed
and the model it would have replaced keeps serving), and removes a replaced or unloaded one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pbd.errors import Code, PbdError, invalid_arg
from pbd.types import FILE_PREFIX

log = logging.getLogger("pbd.repository")
NAME_MAX = 255  # bytes in one path component (Linux's NAME_MAX)
PATH_MAX = 4096  # bytes in a whole path (Linux's PATH_MAX)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class UploadLimits:
    max_bytes: int
    max_files: int


def _refused(name: str, key: str, why: str) -> PbdError:
    # Triton answers any bad file parameter with this INTERNAL error (the why only in its log).
    return PbdError(
        Code.INTERNAL,
        f"failed to load '{name}', failed to poll from model repository: "
        f"invalid file parameter '{key}': {why}",
    )


def upload_parts(name: str, key: str) -> tuple[str, ...]:
    """The components of ``file:<path>``'s path, or the error that refuses it."""
    path = key[len(FILE_PREFIX) :]
    if not path:
        raise _refused(name, key, "the path is empty")
    if "\0" in path:
        raise _refused(name, key, "the path contains a NUL character")
    if "\\" in path:
        raise _refused(name, key, "the path contains a backslash ('/' separates directories)")
    # Triton reads one leading '/' as the model directory itself (its own QA uploads
    # 'file:/1/model.py'); the rest of the path is checked like any other.
    if path.startswith("/"):
        path = path[1:]
    if len(path.encode()) > PATH_MAX:
        raise _refused(name, key, f"the path is longer than {PATH_MAX} bytes")
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            shown = f"'{part}'" if part else "an empty part"
            raise _refused(name, key, f"the path has {shown}; it must stay in the directory")
        if len(part.encode()) > NAME_MAX:
            raise _refused(name, key, f"'{part[:40]}...' is longer than {NAME_MAX} bytes")
    return parts


def check_upload(
    name: str, files: Mapping[str, bytes], limits: UploadLimits
) -> dict[tuple[str, ...], bytes]:
    """The files of an upload by path, all checked; nothing is written."""
    if len(files) > limits.max_files:
        raise invalid_arg(
            f"failed to load '{name}': the upload has {len(files)} files, more than "
            f"--model-upload-max-files ({limits.max_files})"
        )
    total = sum(len(data) for data in files.values())
    if total > limits.max_bytes:
        raise invalid_arg(
            f"failed to load '{name}': the upload has {total} bytes, more than "
            f"--model-upload-max-bytes ({limits.max_bytes})"
        )
    by_path = {upload_parts(name, key): data for key, data in files.items()}
    directories = {parts[:i] for parts in by_path for i in range(1, len(parts))}
    for key, parts in zip(files, by_path, strict=True):
        if parts in directories:
            raise _refused(name, key, "it is also a directory of another file parameter")
    return by_path


class Uploads:
    """The daemon's directory of uploaded models (made at the first upload)."""

    def __init__(self, base: str, limits: UploadLimits) -> None:
        self.base = base
        self.limits = limits
        self.root: Path | None = None

    def stage(self, name: str, files: Mapping[str, bytes]) -> Path:
        """``<root>/<fresh>/<name>`` holding ``files``; the model directory to load."""
        by_path = check_upload(name, files, self.limits)
        fresh: Path | None = None
        try:
            fresh = Path(tempfile.mkdtemp(prefix="upload-", dir=self._root()))
            model_dir = fresh / name
            model_dir.mkdir(mode=0o700)
            for parts, data in by_path.items():
                _write(model_dir, parts, data)
        except OSError as exc:
            if fresh is not None:
                shutil.rmtree(fresh, ignore_errors=True)
            raise PbdError(
                Code.INTERNAL, f"failed to load '{name}': writing the upload failed: {exc}"
            ) from None
        return model_dir

    def owns(self, model_dir: Path) -> bool:
        return self.root is not None and model_dir.parent.parent == self.root

    def remove(self, model_dir: Path) -> None:
        """Remove an upload (its fresh directory); a repository's model directory is kept."""
        if self.owns(model_dir):
            shutil.rmtree(model_dir.parent, ignore_errors=True)

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _root(self) -> Path:
        if self.root is None:
            base = self.base or _default_base()
            os.makedirs(base, mode=0o700, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix="pbd-uploads-", dir=base))
            log.info("model uploads are written under %s", self.root)
        return self.root


def _default_base() -> str:
    """systemd's RuntimeDirectory= (worker units see it; not a private /tmp), else the temp dir."""
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return runtime or tempfile.gettempdir()


def _write(model_dir: Path, parts: tuple[str, ...], data: bytes) -> None:
    fd = os.open(model_dir, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open(parts[-1], _FILE_FLAGS, 0o600, dir_fd=fd)
        with os.fdopen(out, "wb") as stream:
            stream.write(data)
    finally:
        os.close(fd)
