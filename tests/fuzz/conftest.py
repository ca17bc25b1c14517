"""Fuzz tests: the number of inputs each target tried, printed at the end of the run.

The integration harness (``pbd_harness``) is importable here for the end-to-end test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from fuzz_oracles import TRIED  # noqa: E402  (after the path it may need)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TRIED:
        return
    terminalreporter.section("fuzz: inputs tried")
    for target, counts in sorted(TRIED.items()):
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        terminalreporter.write_line(f"{target}: {sum(counts.values())} ({detail})")
    total = sum(sum(c.values()) for c in TRIED.values())
    terminalreporter.write_line(f"total: {total} inputs, each answered with a result or a status")
