"""How the worker imports a model's file: as Triton's stub does, for the model's own
``<version>/model.py`` and for a Python-based backend's shared ``model.py``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pbd_worker.loader import ModelLoadError, load_model_class

MODEL = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


@pytest.fixture(autouse=True)
def _clean_imports() -> Iterator[None]:
    """Each test's sys.path entries and modules go again (the worker imports once per process)."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def test_a_models_own_file_is_module_version_dot_name(tmp_path: Path) -> None:
    version_dir = tmp_path / "m" / "3"
    version_dir.mkdir(parents=True)
    (version_dir / "model.py").write_text(MODEL)
    cls = load_model_class(str(version_dir / "model.py"), str(tmp_path / "m"), "3")
    assert cls.__module__ == "3.model"
    assert str(version_dir) in sys.path and str(tmp_path / "m") in sys.path


def test_a_backends_file_is_module_model_from_its_directory(tmp_path: Path) -> None:
    backend = tmp_path / "backends" / "scale"
    backend.mkdir(parents=True)
    (backend / "model.py").write_text(MODEL)
    (backend / "helper.py").write_text("X = 1\n")  # the backend's own modules import plainly
    (tmp_path / "m" / "1").mkdir(parents=True)
    cls = load_model_class(str(backend / "model.py"), str(tmp_path / "m"), "1", str(backend))
    assert cls.__module__ == "model"
    assert str(backend) in sys.path
    assert str(tmp_path / "m" / "1") not in sys.path  # the model's directory is data only
    __import__("helper")


def test_a_missing_backend_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "model.py"
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model_class(str(missing), str(tmp_path / "m"), "1", str(missing.parent))
