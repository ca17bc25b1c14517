"""Real Python environments for the EXECUTION_ENV_PATH tests, built once and kept under the
checkout's ``.cache/test-envs`` (gitignored) so reruns do not reinstall.

``python -m venv --copies`` makes an environment that still works after it is moved or packed
(no symlink to the base interpreter); pip installs into it from the outside (``--python``), so
the environment carries no pip of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import google.protobuf
from pbd_harness import ROOT

CACHE = ROOT / ".cache" / "test-envs"
# A `packaging` far older than the daemon's own (the model reports which one it imported).
OLD_PACKAGING = "21.3"
MODEL_REQUIREMENTS = (
    "numpy",
    f"protobuf=={google.protobuf.__version__}",
    f"packaging=={OLD_PACKAGING}",
)
_DONE = ".complete"
PIP_TIMEOUT_S = 900


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One builder at a time (test sessions may run side by side)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _key(requirements: Sequence[str]) -> str:
    text = "\0".join([sys.version, *requirements])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def venv(requirements: Sequence[str] = MODEL_REQUIREMENTS) -> Path:
    """A virtualenv of the test interpreter's Python with ``requirements`` installed."""
    target = CACHE / f"venv-{_key(requirements)}"
    with _locked():
        if (target / _DONE).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "venv", "--copies", "--without-pip", str(staging)],
            check=True,
            timeout=PIP_TIMEOUT_S,
        )
        if requirements:
            pip = [sys.executable, "-m", "pip", "--python", str(staging / "bin" / "python")]
            subprocess.run(
                [*pip, "install", "--quiet", "--no-compile", *requirements],
                check=True,
                timeout=PIP_TIMEOUT_S,
            )
        (staging / _DONE).touch()
        staging.rename(target)
    return target


def packed(env: Path) -> Path:
    """``env`` as a .tar.gz with its files at the top level, as conda-pack writes them."""
    archive = env.with_name(env.name + ".tar.gz")
    with _locked():
        if archive.is_file():
            return archive
        staging = archive.with_name(archive.name + ".partial")
        with tarfile.open(staging, "w:gz", compresslevel=1) as tar:
            for child in sorted(env.iterdir()):
                if child.name != _DONE:
                    tar.add(child, arcname=child.name)
        staging.rename(archive)
    return archive
