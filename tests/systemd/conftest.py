"""Fixtures for the systemd suite: a private systemd with pbd's units installed, and a model
repository that the daemon inside reads at /run/pbd-test/repository."""

from __future__ import annotations

import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from private_systemd import PrivateSystemd, unavailable_reason

HERE = Path(__file__).resolve().parent
INTEGRATION_MODELS = HERE.parent / "integration" / "models"
EXAMPLE_MODELS = HERE.parent.parent / "examples" / "models"
MODELS = HERE / "models"

_reason = unavailable_reason()
if _reason is None and sys.prefix.startswith(("/tmp/", "/run/", "/var/tmp/")):
    _reason = f"the test environment {sys.prefix} is under a directory the namespace replaces"


@pytest.fixture
def private_systemd(tmp_path: Path) -> Iterator[PrivateSystemd]:
    if _reason is not None:
        pytest.skip(f"no private systemd: {_reason}")
    shared = tmp_path / "shared"
    (shared / "markers").mkdir(parents=True)
    systemd = PrivateSystemd(shared)
    try:
        systemd.start()
        yield systemd
    finally:
        systemd.stop()


def make_repository(
    shared: Path, models: dict[str, Path], edits: dict[str, tuple[str, str]] | None = None
) -> Path:
    """Copy models into shared/repository; ``edits``: config.pbtxt text replacements."""
    repository = shared / "repository"
    repository.mkdir()
    for name, source in models.items():
        shutil.copytree(source, repository / name)
    for name, (old, new) in (edits or {}).items():
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace(old, new))
    return repository


def shm_prefix() -> str:
    return f"pbdsd{secrets.token_hex(3)}"
