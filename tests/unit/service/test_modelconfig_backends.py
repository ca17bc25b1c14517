"""Triton's backend lookup for Python models: the python backend, Python-based backends in
--backend-directory, and the errors (Triton's words) when neither is there."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from pbd._proto import model_config_pb2 as mc
from pbd.modelconfig.backends import model_file, resolve_backend
from pbd.modelconfig.parse import ConfigError, build_model_config


def _message(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(a model directory "m", a backend directory with a Python-based backend "scale")."""
    model_dir = tmp_path / "models" / "m"
    (model_dir / "1").mkdir(parents=True)
    backends = tmp_path / "backends"
    (backends / "scale").mkdir(parents=True)
    (backends / "scale" / "model.py").write_text("class TritonPythonModel: ...\n")
    return model_dir, backends


def test_the_python_backend_is_left_alone(dirs: tuple[Path, Path]) -> None:
    model_dir, backends = dirs
    for text in ('backend: "python"', ""):
        message = _message(text)
        resolve_backend(message, model_dir, backends, "m/config.pbtxt")
        assert message.runtime == "" and not message.parameters
        config = build_model_config(message, "m", "m/config.pbtxt")
        assert model_file(config, model_dir, 1, backends) == (model_dir / "1" / "model.py", None)


def test_a_python_based_backend_runs_its_model_py(dirs: tuple[Path, Path]) -> None:
    model_dir, backends = dirs
    message = _message('backend: "scale"')
    resolve_backend(message, model_dir, backends, "m/config.pbtxt")
    assert message.runtime == "model.py"  # as Triton's ModelConfig shows it
    config = build_model_config(message, "m", "m/config.pbtxt")
    assert config.default_model_filename == ""  # Triton leaves it empty for such a model
    directory = backends / "scale"
    assert model_file(config, model_dir, 1, backends) == (directory / "model.py", directory)


def test_the_backends_environment_unless_the_model_names_its_own(
    dirs: tuple[Path, Path],
) -> None:
    model_dir, backends = dirs
    archive = backends / "scale" / "pb_exec_env_model.py.tar.gz"
    archive.write_bytes(b"")
    message = _message('backend: "scale"')
    resolve_backend(message, model_dir, backends, "m/config.pbtxt")
    assert message.parameters["EXECUTION_ENV_PATH"].string_value == str(archive)
    own = 'backend: "scale" parameters { key: "EXECUTION_ENV_PATH" value { string_value: "x" } }'
    message = _message(own)
    resolve_backend(message, model_dir, backends, "m/config.pbtxt")
    assert message.parameters["EXECUTION_ENV_PATH"].string_value == "x"


def test_an_explicit_runtime_model_py(dirs: tuple[Path, Path]) -> None:
    model_dir, backends = dirs
    message = _message('backend: "scale" runtime: "model.py"')
    resolve_backend(message, model_dir, backends, "m/config.pbtxt")
    assert message.runtime == "model.py"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'backend: "nope"',
            "unable to find backend library for backend 'nope', try specifying runtime on the "
            "model configuration.",
        ),
        (
            'name: "m" backend: "nope" runtime: "model.py"',
            "unable to find Python backend based backend library 'model.py' for model 'm', "
            "searched: '{backends}/nope/model.py'",
        ),
        (
            'backend: "scale" runtime: "libtriton_scale.so"',
            "m/config.pbtxt: backend 'scale' with runtime 'libtriton_scale.so' is a C++ backend "
            "library",
        ),
    ],
)
def test_triton_s_errors(dirs: tuple[Path, Path], text: str, message: str) -> None:
    model_dir, backends = dirs
    with pytest.raises(ConfigError) as info:
        resolve_backend(_message(text), model_dir, backends, "m/config.pbtxt")
    assert info.value.message.startswith(message.format(backends=backends))


def test_a_cpp_backend_library_is_not_run(dirs: tuple[Path, Path]) -> None:
    model_dir, backends = dirs
    (model_dir / "libtriton_scale.so").write_bytes(b"")
    with pytest.raises(ConfigError) as info:
        resolve_backend(_message('backend: "scale"'), model_dir, backends, "m/config.pbtxt")
    assert "is a C++ backend" in info.value.message


def test_a_relative_backend_directory_reaches_workers_absolute(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir, backends = dirs
    monkeypatch.chdir(backends.parent)
    message = _message('backend: "scale"')
    resolve_backend(message, model_dir, Path("backends"), "m/config.pbtxt")
    config = build_model_config(message, "m", "m/config.pbtxt")
    path, directory = model_file(config, model_dir, 1, Path("backends"))
    assert path.is_absolute() and directory == backends / "scale"
