"""A short soak (``bench.soak``): every RPC with random worker kills for a bounded time.

The documented long run is ``python -m bench.soak --duration 600``; this one runs 20 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pbd_harness import ROOT

SOAK_SECONDS = 20
# Traffic, kills and shutdown: well within this, even on a busy machine.
SOAK_LIMIT_S = SOAK_SECONDS + 240


def test_short_soak_has_no_errors_outside_killed_instances(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--duration", str(SOAK_SECONDS),
         "--kill-every", "4", "--json", str(report_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=SOAK_LIMIT_S, check=False,
    )  # fmt: skip
    assert report_path.exists(), done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    assert report["errors_outside_killed_instances"] == 0, report["first_errors"]
    assert report["kills"] >= 1
    assert report["shm_left_after_stop"] == []
    assert report["daemon_exit_code"] == 0
    kinds = set(report["requests_by_kind"])
    for kind in ("infer victim", "stream steady", "metadata", "index", "load", "shm infer"):
        assert kind in kinds, kinds
    assert done.returncode == 0, done.stdout + done.stderr
