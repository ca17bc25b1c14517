"""scripts/gpu_requirements.py: what scripts/offline_wheels.sh downloads and
tests/gpu/run.sh --wheels installs, read from pyproject.toml."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_requirements_are_the_runtime_and_the_checks_test_dependencies() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gpu_requirements import FROM_TEST_EXTRA, distribution, requirements
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = requirements()
    assert wanted[: len(project["dependencies"])] == project["dependencies"]
    extra = [distribution(r) for r in wanted[len(project["dependencies"]) :]]
    assert sorted(extra) == sorted(FROM_TEST_EXTRA)
    assert not any(distribution(r).startswith(("cupy", "cuda-python")) for r in wanted)
