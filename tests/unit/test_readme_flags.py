"""The README's flag table and `pbd serve --help` agree: every flag of pbd's own (pbd.settings)
is in the table with the default --help prints, and the table names no flag `pbd serve` lacks.
Triton's flags (pbd.triton_flags) are listed in docs/triton-compat.md (test_triton_flags.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pbd.settings import add_arguments
from pbd.triton_flags import add_triton_arguments

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| flag | default | meaning |"
_UNITS = {"MiB": 1 << 20, "GiB": 1 << 30}


def _serve_flags() -> set[str]:
    parser = argparse.ArgumentParser()  # what `pbd serve` is given (pbd.cli)
    add_arguments(parser)
    add_triton_arguments(parser)
    return {option for action in parser._actions for option in action.option_strings}


def _help_defaults() -> dict[str, str | None]:
    """pbd's own flags → the default their --help line prints (None: it prints none)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out: dict[str, str | None] = {}
    for action in parser._actions:
        if "--help" in action.option_strings:
            continue
        found = re.search(r"\(default: ([^)]*)\)$", action.help or "")
        out[action.option_strings[0]] = found.group(1) if found else None
    return out


def _rows() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(HEADER)
    return readme[start : readme.index("\n\n", start)].splitlines()[2:]


def _value(cell: str) -> str | None:
    """A default as the table writes it, as --help would print it; None for words that
    describe an unset default ("—", "any", "the daemon's")."""
    cell = re.sub(r"\s*\([^)]*\)$", "", cell.strip())  # "`0` (none)": the number
    if found := re.fullmatch(r"`([^`]*)`", cell):
        return found.group(1)
    if found := re.fullmatch(r"(\d+) (MiB|GiB)", cell):
        return str(int(found.group(1)) * _UNITS[found.group(2)])
    return None


def _readme_defaults() -> dict[str, str | None]:
    """Each flag in the table → its default there (a flag's first row, where it has two)."""
    out: dict[str, str | None] = {}
    for row in _rows():
        flags_cell, default_cell = row.split("|")[1:3]
        flags_cell = re.sub(r"\(`--[^)]*\)", "", flags_cell)  # Triton's spellings, aliases
        flags = re.findall(r"`(--[a-z0-9-]+)[^`]*`", flags_cell)
        values: list[str | None] = []
        for part in re.split(r", (?![^(]*\))", default_cell):  # not inside parentheses
            repeat = re.fullmatch(r"(.*)×(\d+)", part.strip())
            if repeat:
                values += [_value(repeat.group(1))] * int(repeat.group(2))
            else:
                values.append(_value(part))
        assert len(values) == len(flags), f"one default per flag: {row}"
        for flag, value in zip(flags, values, strict=True):
            out.setdefault(flag, value)
    return out


def test_every_flag_in_the_readme_table_exists() -> None:
    named = {flag for row in _rows() for flag in re.findall(r"`(--[a-z0-9-]+)", row.split("|")[1])}
    assert len(named) > 20, "the README's flag table was not found"
    assert named - _serve_flags() == set()


def test_every_flag_of_pbds_is_in_the_readme_table_with_the_default_help_prints() -> None:
    in_help, in_readme = _help_defaults(), _readme_defaults()
    assert sorted(set(in_help) - set(in_readme)) == [], "flags missing from the README table"
    differ = {
        flag: (printed, in_readme[flag])
        for flag, printed in in_help.items()
        if printed != in_readme[flag]
    }
    assert differ == {}, "(--help, README) defaults that differ"


def test_help_prints_one_default_per_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for action in parser._actions:
        assert (action.help or "").count("default:") <= 1, action.help
        assert "(default: )" not in (action.help or ""), action.help
