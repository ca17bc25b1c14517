"""GPU checks: they need an NVIDIA GPU, CuPy (the daemon's and workers' ``gpu`` extra) and
cuda-python (tritonclient's CUDA shared-memory utilities, the ``gpu-test`` extra). Without any
of them every test here is skipped with the reason. ``tests/gpu/run.sh`` runs them all."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from pbd.gpus import visible_gpus  # noqa: E402

GPU_MODELS = Path(__file__).resolve().parent / "models"


def gpu_skip_reason() -> str | None:
    if not visible_gpus():
        return "no NVIDIA GPU visible (/proc/driver/nvidia/gpus is empty)"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install -e '.[gpu]')"
    if importlib.util.find_spec("cuda") is None:
        return "cuda-python is not installed (pip install -e '.[gpu-test]')"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    ours = [i for i in items if here in Path(str(i.fspath)).resolve().parents]
    reason = gpu_skip_reason() if ours else None
    for item in ours:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
