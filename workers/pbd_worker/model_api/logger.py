"""``pb_utils.Logger``: model log lines through Python ``logging``.

Records go to the ``pbd_worker.model`` logger with the model's own file and line (``stacklevel``),
and the worker runtime decides where they end up. ``VERBOSE`` maps to ``DEBUG``, so verbose lines
appear only when the daemon runs with verbose logging, as with Triton's ``--log-verbose``.
"""

from __future__ import annotations

import logging
from enum import IntEnum
from typing import TypeAlias

_log = logging.getLogger("pbd_worker.model")


class LogLevel(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_TO_LOGGING = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


def _emit(level: LogLevel, message: str) -> None:
    # Triton's binding takes a str and a Logger.LogLevel (not an int, None or a name).
    if not isinstance(message, str):
        raise TypeError(f"the log message must be a str, got {type(message).__name__}")
    if not isinstance(level, LogLevel):
        raise TypeError(f"the log level must be a pb_utils.Logger level, got {level!r}")
    # stacklevel 3: skip _emit and the Logger method, and name the model's line.
    _log.log(_TO_LOGGING[level], "%s", message, stacklevel=3)


class Logger:
    # pb_utils.Logger.LogLevel.INFO, as in Triton; an alias, so it also names the type below.
    LogLevel: TypeAlias = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        _emit(level, message)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(LogLevel.INFO, message)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(LogLevel.WARNING, message)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(LogLevel.ERROR, message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(LogLevel.VERBOSE, message)
