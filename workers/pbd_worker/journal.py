"""Log lines that read well both in a terminal and in journald.

Under systemd (stderr connected to the journal, ``JOURNAL_STREAM`` names it) a line carries a
``<N>`` syslog priority prefix, which journald turns into the entry's priority, and no
timestamp of its own (journald stamps every entry). Elsewhere lines start with the time.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

# Python levels -> syslog priorities (sd-daemon(3)): err, warning, info, debug.
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def stderr_is_journal(
    stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """True when ``stream`` (stderr) is the journal stream systemd connected us to."""
    env = os.environ if environ is None else environ
    value = env.get("JOURNAL_STREAM", "")
    if ":" not in value:
        return False
    try:
        st = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError):
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


class JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        priority = _PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        # Continuation lines (tracebacks) would lose the priority: prefix each.
        return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))
