"""Print, one per line, what the GPU checks need installed besides CuPy and cuda-python: pbd's
runtime dependencies, and of the test extra tritonclient, pytest, pytest-timeout and
hypothesis (read from pyproject.toml). Used by scripts/offline_wheels.sh and by
tests/gpu/run.sh --wheels, so the two agree."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
FROM_TEST_EXTRA = ("tritonclient", "pytest", "pytest-timeout", "hypothesis")


def distribution(requirement: str) -> str:
    """The distribution a requirement names: ``tritonclient[grpc]==2.73.0`` -> tritonclient."""
    return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0].lower()


def requirements(pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = list(project["dependencies"])
    for requirement in project["optional-dependencies"]["test"]:
        if distribution(requirement) in FROM_TEST_EXTRA:
            wanted.append(requirement)
    return wanted


if __name__ == "__main__":
    print("\n".join(requirements()))
    sys.exit(0)
