"""What the GPU tests share: their model repository and why they would be skipped here.

Its own module, not conftest.py: a test importing ``conftest`` gets whichever conftest module
pytest imported first under that name (tests/integration has one too), and that depends on
which paths were collected.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pbd.gpus import visible_gpus

GPU_MODELS = Path(__file__).resolve().parent / "models"


def gpu_skip_reason() -> str | None:
    if not visible_gpus():
        return "no NVIDIA GPU visible (/proc/driver/nvidia/gpus is empty)"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install -e '.[gpu]')"
    if importlib.util.find_spec("cuda") is None:
        return "cuda-python is not installed (pip install -e '.[gpu-test]')"
    return None
