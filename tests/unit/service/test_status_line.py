"""The one-line summaries: failed versions named with a short reason, versions only where a
model has several, long lists cut."""

from __future__ import annotations

from pbd.status_line import MAX_NAMED, failed, named
from pbd.types import IndexEntry


def test_failed_versions_are_named_with_the_first_line_of_why() -> None:
    rows = [
        IndexEntry("ok", "1", "READY"),
        IndexEntry("broken", "1", "UNAVAILABLE", "initialize() failed: boom\nAt:\n  model.py(3)"),
        IndexEntry("multi", "1", "READY"),
        IndexEntry("multi", "2", "UNAVAILABLE", "x" * 300),
        IndexEntry("gone", "1", "UNAVAILABLE", "unloaded"),
        IndexEntry("never_loaded"),
    ]
    bad = failed(rows)
    assert [(r.name, r.version) for r in bad] == [("broken", "1"), ("multi", "2")]
    text = named(bad, rows)
    assert text.startswith("broken (initialize() failed: boom [...]), multi v2 (xxx")
    assert text.endswith("...)") and len(text) < 200


def test_a_long_list_is_cut() -> None:
    rows = [IndexEntry(f"m{i}", "1", "UNAVAILABLE", "bad") for i in range(MAX_NAMED + 3)]
    assert named(rows, rows).endswith(f"m{MAX_NAMED - 1} (bad), and 3 more")
