"""Logging as Triton's log settings describe it, for the daemon and its workers alike.

``LogConfig`` holds the LogSettings extension's values (log_info, log_warning, log_error,
log_verbose_level, log_format); ``apply`` makes the root logger follow them: one stderr handler
whose filter drops the disabled severities, DEBUG records only when verbose > 0 (asyncio's
below WARNING only from verbose 2), and the timestamp style of ``log_format`` ("default" or
"ISO8601", UTC); under systemd, when stderr is the journal, no timestamp but a ``<N>``
priority prefix (see ``journal``). Applying again (a LogSettings update, pushed to workers
too) replaces the handler.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from pbd_worker import journal

LOG_FORMATS = ("default", "ISO8601")
# Libraries whose DEBUG and INFO lines say nothing about serving ("Using selector:
# EpollSelector"): shown from verbose level 2, their warnings always.
LIBRARY_LOGGERS = ("asyncio",)
LIBRARY_VERBOSE_LEVEL = 2


@dataclass
class LogConfig:
    info: bool = True
    warning: bool = True
    error: bool = True
    verbose: int = 0
    format: str = "default"


class _SeverityFilter(logging.Filter):
    def __init__(self, config: LogConfig) -> None:
        super().__init__()
        self.config = config

    def filter(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        if level >= logging.ERROR:
            return self.config.error
        if level >= logging.WARNING:
            return self.config.warning
        if level >= logging.INFO:
            return self.config.info
        return self.config.verbose > 0


class _Iso8601Formatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))


def apply(config: LogConfig, prefix: str = "") -> None:
    """Route the root logger through one stderr handler configured by ``config``.

    ``prefix`` goes between the severity and the logger name (a worker's instance id)."""
    where = f"[{prefix}] " if prefix else ""
    body = f"%(levelname)s {where}%(name)s: %(message)s"
    formatter: logging.Formatter
    if journal.stderr_is_journal(sys.stderr):
        # journald stamps each entry and takes the priority from the <N> prefix.
        formatter = journal.JournalFormatter(body)
    elif config.format == "ISO8601":
        formatter = _Iso8601Formatter(f"%(asctime)s {body}")
    else:
        formatter = logging.Formatter(f"%(asctime)s {body}")
    # A worker's stderr prefixes each line with the instance (pbd_worker.output); its records
    # name the instance themselves and go to the same descriptor, whole, without it.
    handler = logging.StreamHandler(getattr(sys.stderr, "unprefixed", sys.stderr))
    handler.setFormatter(formatter)
    handler.addFilter(_SeverityFilter(config))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if config.verbose > 0 else logging.INFO)
    quiet = config.verbose < LIBRARY_VERBOSE_LEVEL
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
