"""GPU checks: they need an NVIDIA GPU, CuPy (the daemon's and workers' ``gpu`` extra) and
cuda-python (tritonclient's CUDA shared-memory utilities, the ``gpu-test`` extra). Without any
of them every test here is skipped with the reason. ``tests/gpu/run.sh`` runs them all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from gpu_env import gpu_skip_reason  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    ours = [i for i in items if here in Path(str(i.fspath)).resolve().parents]
    reason = gpu_skip_reason() if ours else None
    for item in ours:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
