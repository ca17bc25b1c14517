"""pbd.fronts.supervisor: where the daemon's private HTTP socket lives."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

import pytest

from pbd.fronts.supervisor import private_directory


def _mode(path: str) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def test_private_directory_is_in_the_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    made = private_directory(tmp_path / "shm")
    assert Path(made).parent == tmp_path / "tmp"
    assert _mode(made) == 0o700


def test_read_only_root_puts_it_under_the_shm_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's readOnlyRootFilesystem: no temp directory can be made; /dev/shm still can."""
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-only"))  # absent: unusable
    (tmp_path / "shm").mkdir()
    made = private_directory(tmp_path / "shm")
    assert Path(made).parent == tmp_path / "shm"
    assert Path(made).name.startswith("pbd-fronts-")
    assert _mode(made) == 0o700


def test_systemds_runtime_directory_is_not_second_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "gone"))
    (tmp_path / "shm").mkdir()
    with pytest.raises(FileNotFoundError):
        private_directory(tmp_path / "shm")
