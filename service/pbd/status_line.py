"""What the daemon says about its models in one line: systemd's STATUS= and the "pbd ready"
log line. Both name the versions that failed, with why, so `systemctl status pbd` and the
journal never read "ready" over a model that is not; while models load, STATUS says what each
one is doing (initialize(), unpacking its environment and how far)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from pbd.types import IndexEntry

if TYPE_CHECKING:
    from pbd.repository.manager import ModelRepository

# Enough to tell the versions apart and read why; the index (`pbd status`) has the rest.
MAX_NAMED = 5
MAX_REASON_CHARS = 120


def one_line(text: str) -> str:
    """A reason's first line, marked when more followed (tracebacks keep the table whole)."""
    first, _, rest = text.strip().partition("\n")
    return f"{first} [...]" if rest.strip() else first


def failed(rows: list[IndexEntry]) -> list[IndexEntry]:
    """Versions that were to serve and do not: failed loads, given-up instances (an unloaded
    version, or a model never asked to load, is no failure)."""
    return [r for r in rows if r.state == "UNAVAILABLE" and r.reason not in ("", "unloaded")]


def named(rows: list[IndexEntry], all_rows: list[IndexEntry]) -> str:
    """``a (why), b v2 (why)``: the version only where the model has several."""
    versions = Counter(r.name for r in all_rows)
    parts = []
    for row in rows[:MAX_NAMED]:
        label = row.name if versions[row.name] == 1 else f"{row.name} v{row.version}"
        reason = one_line(row.reason)
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        parts.append(f"{label} ({reason})")
    if len(rows) > MAX_NAMED:
        parts.append(f"and {len(rows) - MAX_NAMED} more")
    return ", ".join(parts)


def ready_line(repository: ModelRepository) -> tuple[int, str]:
    """The log level and line once the startup models are loaded (a WARNING when some
    failed)."""
    rows = repository.index()
    ready = sum(r.state == "READY" for r in rows)
    bad = failed(rows)
    line = f"pbd ready: {ready} of {ready + len(bad)} model version(s) loaded"
    if bad:
        return logging.WARNING, f"{line}; failed: {named(bad, rows)}"
    return logging.INFO, line


def status_text(repository: ModelRepository) -> str:
    """systemd's STATUS=: what is loading and how far, versions ready, instances ready of
    all, and what failed."""
    rows = repository.index()
    models = ready = total = 0
    for entry in repository.entries.values():
        for runtime in entry.versions.values():
            models += runtime.ready
            for instance in runtime.instances():
                total += 1
                ready += instance.state.value == "READY"
    text = f"{models} model version(s) ready, {ready}/{total} instances ready"
    loading = [
        IndexEntry(r.name, r.version, r.state, r.reason.removeprefix("loading: ") or "starting")
        for r in rows
        if r.state == "LOADING"
    ]
    if loading:
        text = f"loading {len(loading)} model version(s): {named(loading, rows)}; {text}"
    bad = failed(rows)
    return f"{text}; {len(bad)} failed: {named(bad, rows)}" if bad else text
