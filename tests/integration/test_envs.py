"""EXECUTION_ENV_PATH: a model runs under its own virtualenv (a directory, or a packed .tar.gz
unpacked once into the daemon's cache), with a package version the daemon does not have;
broken environments and unsafe archives fail that model's load with a clear message."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import packaging
import pyenvs
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import TEST_MODELS, Daemon, infer_input, make_repository, running_daemon

GOOD = ("env_dir", "env_archive")
BROKEN = ("env_zipslip", "env_no_numpy", "env_no_python", "env_missing", "env_outside")


def _model(repository: Path, name: str, env_value: str) -> Path:
    """A copy of env_model named ``name`` whose EXECUTION_ENV_PATH is ``env_value``."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_bytes((TEST_MODELS / "env_model/1/model.py").read_bytes())
    config = (TEST_MODELS / "env_model" / "config.pbtxt").read_text()
    config = config.replace('"env_model"', f'"{name}"')
    config = config.replace("$$TRITON_MODEL_DIRECTORY/env", env_value)
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _zipslip_archive(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name in ("bin/readme.txt", "../escaped.txt"):
            data = b"should never be written\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envs")


@pytest.fixture(scope="module")
def daemon(workdir: Path) -> Iterator[Daemon]:
    env = pyenvs.venv()
    bare = pyenvs.venv(requirements=())  # Python, but no numpy and no protobuf
    repository = make_repository(workdir, {})
    # As Triton's docs write it: the environment next to the model, named through
    # $$TRITON_MODEL_DIRECTORY (here a link to the cached build).
    (_model(repository, "env_dir", "$$TRITON_MODEL_DIRECTORY/env") / "env").symlink_to(env)
    archive_model = _model(repository, "env_archive", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    (archive_model / "env.tar.gz").symlink_to(pyenvs.packed(env))
    _zipslip_archive(_model(repository, "env_zipslip", "evil.tar.gz") / "evil.tar.gz")
    (_model(repository, "env_no_numpy", "$$TRITON_MODEL_DIRECTORY/env") / "env").symlink_to(bare)
    (_model(repository, "env_no_python", "$$TRITON_MODEL_DIRECTORY/env") / "env/bin").mkdir(
        parents=True
    )
    _model(repository, "env_missing", "$$TRITON_MODEL_DIRECTORY/nonexistent.tar.gz")
    _model(repository, "env_outside", str(env))  # an absolute path out of the repository
    args = ("--execution-env-cache-dir", str(workdir / "env-cache"))
    with running_daemon(repository, workdir, *args, settle=[*GOOD, *BROKEN]) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def _report(client: grpcclient.InferenceServerClient, model: str) -> tuple[str, str]:
    inputs = [infer_input("INPUT0", np.zeros(1, np.float32), "FP32")]
    result = client.infer(model, inputs)
    version = result.as_numpy("VERSION")[0].decode()
    prefix = result.as_numpy("PREFIX")[0].decode()
    return version, prefix


def _reason(daemon: Daemon, model: str) -> str:
    entries = [e for (name, _), e in daemon.index().items() if name == model]
    assert entries and all(e.state == "UNAVAILABLE" for e in entries), entries
    return str(entries[0].reason)


def test_a_venv_directory_runs_the_model_with_its_own_packages(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert packaging.__version__ != pyenvs.OLD_PACKAGING  # the daemon's is another one
    version, prefix = _report(client, "env_dir")
    assert version == pyenvs.OLD_PACKAGING
    assert os.path.realpath(prefix) == os.path.realpath(pyenvs.venv())


def test_a_packed_env_is_unpacked_into_the_daemons_cache(
    client: grpcclient.InferenceServerClient, workdir: Path, daemon: Daemon
) -> None:
    version, prefix = _report(client, "env_archive")
    assert version == pyenvs.OLD_PACKAGING
    cache = workdir / "env-cache"
    assert Path(prefix).parent == cache
    assert (Path(prefix) / "bin" / "python").is_file()
    assert daemon.log().count("env_archive/env.tar.gz into ") == 1  # unpacked once


def test_an_archive_member_with_dotdot_is_refused(daemon: Daemon, workdir: Path) -> None:
    reason = _reason(daemon, "env_zipslip")
    assert "EXECUTION_ENV_PATH" in reason and "evil.tar.gz" in reason
    assert "unsafe archive, not unpacked: member '../escaped.txt'" in reason
    assert not list(workdir.rglob("escaped.txt"))
    assert not [
        p for p in (workdir / "env-cache").iterdir() if p.name.startswith(("evil", ".evil"))
    ]


def test_an_env_without_numpy_fails_with_the_path_and_what_is_missing(daemon: Daemon) -> None:
    reason = _reason(daemon, "env_no_numpy")
    assert "env_no_numpy/env" in reason
    assert "cannot import numpy" in reason


def test_an_env_without_an_interpreter_fails_clearly(daemon: Daemon) -> None:
    reason = _reason(daemon, "env_no_python")
    assert "has no Python interpreter" in reason and "env_no_python/env" in reason


def test_a_missing_env_fails_clearly(daemon: Daemon) -> None:
    assert "env_missing/nonexistent.tar.gz': cannot be read" in _reason(daemon, "env_missing")


def test_an_env_outside_the_repository_is_refused(daemon: Daemon) -> None:
    assert "leaves the model repository" in _reason(daemon, "env_outside")


def test_the_broken_envs_leave_the_good_models_serving(
    client: grpcclient.InferenceServerClient,
) -> None:
    for model in GOOD:
        assert client.is_model_ready(model)
    for model in BROKEN:
        assert not client.is_model_ready(model)


def _other_python() -> str | None:
    """An interpreter of another Python minor version on this machine, if any."""
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for minor in range(8, 16):
        name = f"python3.{minor}"
        if name == f"python{ours}":
            continue
        for base in ("/usr/bin", "/usr/local/bin"):
            if os.access(f"{base}/{name}", os.X_OK):
                return f"{base}/{name}"
    return None


def test_an_env_of_another_python_version_is_refused(tmp_path: Path) -> None:
    other = _other_python()
    if other is None:
        pytest.skip("no interpreter of another Python version on this machine")
    env = tmp_path / "other-env"
    subprocess.run([other, "-m", "venv", "--without-pip", str(env)], check=True, timeout=300)
    repository = make_repository(tmp_path, {})
    _model(repository, "env_other", str(env))
    with running_daemon(repository, tmp_path, settle=["env_other"]) as daemon:
        reason = _reason(daemon, "env_other")
    assert str(env) in reason and "build the environment with the same Python version" in reason


def test_a_traced_request_is_served_in_an_env_without_opentelemetry(tmp_path: Path) -> None:
    repository = make_repository(tmp_path, {})
    (_model(repository, "env_dir", "$$TRITON_MODEL_DIRECTORY/env") / "env").symlink_to(
        pyenvs.venv()
    )
    args = ("--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1")
    env = {"OTEL_TRACES_EXPORTER": "console"}
    with running_daemon(repository, tmp_path, *args, settle=["env_dir"], env=env) as daemon:
        version, _ = _report(daemon.client(), "env_dir")
        assert version == pyenvs.OLD_PACKAGING
        assert "not tracing in this worker: No module named 'opentelemetry'" in daemon.log()
