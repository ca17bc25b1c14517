"""Each atheris target for a fixed number of runs, as a subprocess with a time bound.

libFuzzer exits non-zero on a crash (an exception that is not PbdError, a failed oracle
assertion) and on an input running past ``-timeout`` seconds (a hang); the crashing input is
left in the test's directory and its traceback in the output shown on failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_oracles import tally

pytest.importorskip("atheris")

TARGETS_SCRIPT = Path(__file__).with_name("fuzz_targets.py")
# Runs per target, sized so all six take ~12 s of CPU; framing does a socket pair and an
# event loop per input.
RUNS = {
    "grpc_request": 4_000,
    "http_request": 4_000,
    "config_pbtxt": 3_000,
    "config_json": 3_000,
    "framing": 1_000,
    "h2_frames": 3_000,
}
PER_INPUT_TIMEOUT_S = 10
# Far above what RUNS take (a few seconds on a loaded 2-core machine); only a hang gets here.
RUN_TIMEOUT_S = 240


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzz_atheris(target: str, tmp_path: Path) -> None:
    corpus, scratch = tmp_path / "corpus", tmp_path / "tmp"
    scratch.mkdir()
    command = [sys.executable, str(TARGETS_SCRIPT), target]
    subprocess.run([*command, "--seed", str(corpus)], check=True, timeout=RUN_TIMEOUT_S)
    result = subprocess.run(
        [*command, str(corpus), f"-runs={RUNS[target]}", f"-timeout={PER_INPUT_TIMEOUT_S}",
         "-rss_limit_mb=2048", "-seed=1", "-print_final_stats=1"],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    done = re.search(r"^Done (\d+) runs", output, re.MULTILINE)
    assert done is not None, output[-4000:]
    assert int(done.group(1)) >= RUNS[target]
    tally(f"{target} (atheris)", "ran", int(done.group(1)))
