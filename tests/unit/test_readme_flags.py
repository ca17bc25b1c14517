"""The README's flag table names only flags `pbd serve` has (no claim outlives its flag)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pbd.settings import add_arguments
from pbd.triton_flags import add_triton_arguments

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| flag | default | meaning |"


def _serve_flags() -> set[str]:
    parser = argparse.ArgumentParser()  # what `pbd serve` is given (pbd.cli)
    add_arguments(parser)
    add_triton_arguments(parser)
    return {option for action in parser._actions for option in action.option_strings}


def test_every_flag_in_the_readme_table_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(HEADER)
    rows = readme[start : readme.index("\n\n", start)].splitlines()[2:]
    named = {flag for row in rows for flag in re.findall(r"`(--[a-z0-9-]+)", row.split("|")[1])}
    assert len(named) > 20, "the README's flag table was not found"
    assert named - _serve_flags() == set()
