"""Where a model's environment is, and the checks that run before a worker starts in it."""

from __future__ import annotations

import io
import logging
import re
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pbd.execenv import archive
from pbd.execenv.prepare import EnvError, default_cache_dir, env_path, prepare


def test_env_path_substitutes_the_model_directory(tmp_path: Path) -> None:
    value = {"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/py311.tar.gz"}
    assert env_path(value, tmp_path) == tmp_path / "py311.tar.gz"


def test_env_path_relative_and_absolute(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "m"
    assert env_path({"EXECUTION_ENV_PATH": "envs/a"}, model) == model / "envs" / "a"
    shared = str(tmp_path / "repo" / "envs" / "a.tar.gz")
    assert env_path({"EXECUTION_ENV_PATH": shared}, model) == Path(shared)
    assert env_path({"EXECUTION_ENV_PATH": "../envs/b"}, model) == tmp_path / "repo" / "envs" / "b"
    assert env_path({}, model) is None
    assert env_path({"EXECUTION_ENV_PATH": "  "}, model) is None


@pytest.mark.parametrize(
    "value",
    ["/opt/env", "$$TRITON_MODEL_DIRECTORY/../../x.tar.gz", "../..", "..", "a/../../../b"],
)
def test_env_path_that_leaves_the_repository_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(EnvError, match="leaves the model repository") as caught:
        env_path({"EXECUTION_ENV_PATH": value}, tmp_path / "repo" / "m")
    assert caught.value.message.startswith(f"EXECUTION_ENV_PATH '{value}'")


def test_a_backends_environment_may_be_in_its_directory(tmp_path: Path) -> None:
    """What a Python-based backend ships is the operator's, as the repository is."""
    model, backend = tmp_path / "repo" / "m", tmp_path / "backends" / "vllm"
    shipped = str(backend / "pb_exec_env_model.py.tar.gz")
    assert env_path({"EXECUTION_ENV_PATH": shipped}, model, backend) == Path(shipped)
    with pytest.raises(EnvError, match="leaves the model repository"):
        env_path({"EXECUTION_ENV_PATH": str(tmp_path / "backends" / "other")}, model, backend)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/pbd")
    assert default_cache_dir() == Path("/var/cache/pbd/envs")
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "pbd" / "envs"


def test_a_directory_without_an_interpreter(tmp_path: Path) -> None:
    (tmp_path / "env" / "bin").mkdir(parents=True)
    with pytest.raises(EnvError) as info:
        prepare(tmp_path / "env", tmp_path / "cache")
    assert info.value.message == (
        f"EXECUTION_ENV_PATH '{tmp_path / 'env'}': has no Python interpreter "
        f"({tmp_path / 'env'}/bin/python3 is missing)"
    )


def test_a_file_that_is_no_archive(tmp_path: Path) -> None:
    bogus = tmp_path / "env.tar.gz"
    bogus.write_text("nope")
    with pytest.raises(EnvError, match="not a readable tar archive"):
        prepare(bogus, tmp_path / "cache")


def test_the_daemons_own_environment_passes(tmp_path: Path) -> None:
    """The test interpreter's environment has everything a worker needs."""
    env = prepare(Path(sys.prefix), tmp_path / "cache")
    assert Path(env.python).parent == Path(sys.prefix) / "bin"
    shim = Path(env.variables["PYTHONPATH"])
    assert sorted(p.name for p in shim.iterdir()) == [
        "pbd_wire",
        "pbd_worker",
        "sdnotify",
        "triton_python_backend_utils.py",
    ]


def test_unpacking_logs_its_progress_and_tells_the_loading_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(archive, "PROGRESS_INTERVAL_S", 0.0)  # report on every read
    packed = tmp_path / "env.tar.gz"
    data = np.random.default_rng(3).bytes(1_000_000)
    with tarfile.open(packed, "w:gz") as tar:  # an environment without an interpreter
        for i in range(3):
            info = tarfile.TarInfo(f"lib/blob{i}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    steps: list[str] = []
    with caplog.at_level(logging.INFO, "pbd.execenv"), pytest.raises(EnvError):
        prepare(packed, tmp_path / "cache", steps.append)
    lines = [r.getMessage() for r in caplog.records]
    assert any(re.fullmatch(r"unpacking env\.tar\.gz: \d+%, checking members .*", m) for m in lines)
    assert any(re.fullmatch(r"unpacking env\.tar\.gz: \d+%, extracting .*", m) for m in lines)
    assert re.fullmatch(rf"unpacked {packed} in \d+\.\ds \(3 members\)", lines[-1]), lines
    assert steps and all(
        re.fullmatch(r"unpacking the model's environment \d+%", step) for step in steps
    )
