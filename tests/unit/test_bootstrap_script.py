"""scripts/bootstrap.sh refuses an environment directory outside the checkout before it
installs anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap.sh"


@pytest.mark.parametrize("venv", ["/tmp/elsewhere", "../outside", "sub/../../outside"])
def test_venv_outside_the_checkout_is_refused(venv: str) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, "VENV": venv},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"VENV must be a directory inside the checkout, not '{venv}'" in done.stderr
    assert not Path(SCRIPT.parents[1], venv).exists()  # nothing was created there
