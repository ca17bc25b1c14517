"""Unit names, EnvironmentFiles and `pbd install-units`, checked against systemd's own tools
where they are installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pbd import cli
from pbd.settings import Settings
from pbd.systemd import units
from pbd.systemd.launcher import SystemdLauncher
from pbd.worker.launcher import WorkerSpec
from pbd_wire import SCHEDULING_ENV

NAMES = ["add_sub/1/add_sub_0_0", "my-model/3/my-model_0_1", ".hidden/1/x", "ünï/1/g_0", "a b/1/c"]


@pytest.mark.parametrize("text", NAMES)
def test_escape_matches_systemd_escape(text: str) -> None:
    if shutil.which("systemd-escape") is None:
        pytest.skip("systemd-escape is not installed")
    expected = subprocess.run(
        ["systemd-escape", "--", text], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert units.escape(text) == expected


@given(st.text(min_size=1, max_size=40).filter(lambda t: "/" not in t[:1] and "\x00" not in t))
def test_unescape_inverts_escape(text: str) -> None:
    # '-' in the text is escaped, so only '/' turns into '-' and back.
    assert units.unescape(units.escape(text)) == text


def test_worker_unit_and_model_slice() -> None:
    assert units.worker_unit("add_sub/1/add_sub_0_0") == "pbd-worker@add_sub-1-add_sub_0_0.service"
    # The model's own dashes must not nest the slice under another model's.
    assert units.model_slice("my-model") == "pbd-my\\x2dmodel.slice"


def test_env_file_round_trip(tmp_path: Path) -> None:
    values = {"PBD_PYTHON": "/opt/venv/bin/python", "TOKEN": 'a"b\\c d', "EMPTY": ""}
    path = tmp_path / "workers" / "x.env"
    units.write_private(path, units.env_file_text(values))
    assert path.stat().st_mode & 0o777 == 0o600  # the token is a secret
    assert units.read_env_file(path) == values
    assert units.read_env_file(tmp_path / "missing.env") == {}


def test_install_units_writes_units_and_drop_in(tmp_path: Path, capsys) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    unit_dir = tmp_path / "units"
    code = cli.main([
        "install-units", "--unit-dir", str(unit_dir), "--model-repository", str(repo),
        "--python", "/opt/venv/bin/python", "--setting", "grpc_port=9001",
    ])  # fmt: skip
    assert code == 0
    assert (unit_dir / "pbd.service").read_text() == (units.SHIPPED_DIR / "pbd.service").read_text()
    assert (unit_dir / "pbd-worker@.service").is_file()
    dropin = (unit_dir / "pbd.service.d" / "10-install.conf").read_text()
    assert 'Environment="PBD_PYTHON=/opt/venv/bin/python"' in dropin
    assert f'Environment="PBD_MODEL_REPOSITORY={repo.resolve()}"' in dropin
    assert 'Environment="PBD_GRPC_PORT=9001"' in dropin
    assert "wrote" in capsys.readouterr().out


def test_install_units_refuses_unknown_setting(tmp_path: Path, capsys) -> None:
    code = cli.main([
        "install-units", "--unit-dir", str(tmp_path), "--model-repository", str(tmp_path),
        "--setting", "no_such=1",
    ])  # fmt: skip
    assert code == 2
    assert "unknown setting 'no_such=1'" in capsys.readouterr().err


def test_an_instance_in_its_own_environment_gets_that_interpreter(tmp_path: Path) -> None:
    """EXECUTION_ENV_PATH under the systemd launcher: the EnvironmentFile names the model's
    interpreter (the unit's ExecStart runs ${PBD_PYTHON}) and carries its variables."""
    settings = Settings(systemd_env_dir=tmp_path / "env", systemd_unit_dir=tmp_path / "units")
    launcher = SystemdLauncher(settings)
    spec = WorkerSpec("m/1/m_0", "/run/pbd/worker.sock", {"PYTHONPATH": "/c/wp"}, python="/e/py")
    launcher._write_unit_files(spec)
    written = units.read_env_file(tmp_path / "env" / "m-1-m_0.env")
    assert written["PBD_PYTHON"] == "/e/py"
    assert written["PYTHONPATH"] == "/c/wp"


@pytest.mark.parametrize("policy", ["batch", "normal"])
def test_the_environment_file_names_the_workers_scheduling_policy(
    tmp_path: Path, policy: str
) -> None:
    """The unit's worker applies --worker-scheduling to itself, as a child process does."""
    settings = Settings(
        systemd_env_dir=tmp_path / "env",
        systemd_unit_dir=tmp_path / "units",
        worker_scheduling=policy,
    )
    SystemdLauncher(settings)._write_unit_files(WorkerSpec("m/1/m_0", "/run/pbd/worker.sock"))
    written = units.read_env_file(tmp_path / "env" / "m-1-m_0.env")
    assert written[SCHEDULING_ENV] == policy
