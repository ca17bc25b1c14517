"""The log extension (LogSettings): Triton's checks, the daemon's logging, the workers' too.

The live values are the ``log_*`` fields of the daemon's ``Settings`` (a LogSettings update
changes them there, so a worker started later gets them too); ``pbd_worker.logconfig`` turns
them into logging configuration in both processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pbd.errors import Code, PbdError, invalid_arg
from pbd.settings import Settings
from pbd_wire import worker_pb2 as wpb
from pbd_worker.logconfig import LOG_FORMATS, LogConfig, apply

# setting -> (the request oneof it must use, the Settings field, Triton's type word)
_FIELDS = {
    "log_info": ("bool_param", "log_info", "boolean"),
    "log_warning": ("bool_param", "log_warning", "boolean"),
    "log_error": ("bool_param", "log_error", "boolean"),
    "log_verbose_level": ("uint32_param", "log_verbose", "int32"),
    "log_format": ("string_param", "log_format", "string"),
}


@dataclass(frozen=True)
class Wording:
    """How a transport words a value it cannot take: Triton's gRPC and HTTP front ends check
    the same things but say them differently (and HTTP answers 500 and 503 where gRPC says
    INVALID_ARGUMENT)."""

    wrong_type: Callable[[str, str, str], PbdError]  # (key, expected oneof, Triton's type word)
    bad_format: Callable[[str], PbdError]  # (the log_format given)


GRPC = Wording(
    wrong_type=lambda key, _kind, word: invalid_arg(f"expect {word} for '{key}'"),
    bad_format=lambda value: invalid_arg(f"invalid argument for log_format, got: {value}"),
)
# Triton's HTTP front end reads the JSON with TritonJson, whose type errors it returns as is.
_JSON_WORDS = {
    "bool_param": "boolean",
    "uint32_param": "unsigned-integer",
    "string_param": "string",
}
HTTP = Wording(
    wrong_type=lambda _key, kind, _word: PbdError(
        Code.INTERNAL, f"attempt to access JSON non-{_JSON_WORDS[kind]} as {_JSON_WORDS[kind]}"
    ),
    bad_format=lambda value: PbdError(
        Code.UNAVAILABLE, f"invalid argument for --log_format, got: {value}"
    ),
)


def log_config(settings: Settings) -> LogConfig:
    return LogConfig(
        info=settings.log_info,
        warning=settings.log_warning,
        error=settings.log_error,
        verbose=settings.log_verbose,
        format=settings.log_format,
    )


def runtime_settings(settings: Settings) -> wpb.RuntimeSettings:
    """What a worker is told at start and after each update."""
    return wpb.RuntimeSettings(
        log_info=settings.log_info,
        log_warning=settings.log_warning,
        log_error=settings.log_error,
        log_verbose=settings.log_verbose,
        log_format=settings.log_format,
    )


def update_log_settings(
    settings: Settings,
    values: Mapping[str, tuple[str | None, Any]],
    wording: Wording = GRPC,
) -> None:
    """Apply a LogSettings request (``{key: (oneof kind, value)}``, from gRPC or HTTP), Triton's
    way: keys in Triton's order, each checked then applied (an error leaves the keys before it
    applied); an unknown key is ignored."""
    if "log_file" in values:
        raise PbdError(
            Code.UNSUPPORTED, "log file location can not be updated through network protocol"
        )
    try:
        for key, (kind, attr, word) in _FIELDS.items():
            if key not in values:
                continue
            given_kind, value = values[key]
            if given_kind != kind:
                raise wording.wrong_type(key, kind, word)
            if key == "log_format" and value not in LOG_FORMATS:
                raise wording.bad_format(value)
            setattr(settings, attr, value)
    finally:
        apply(log_config(settings))


def open_log_file(path: str) -> None:
    """``--log-file``: the process's stderr is appended to ``path`` (created if need be), as
    Triton appends its log there. Workers inherit stderr, so their log goes there too; what
    models print to stdout stays on stdout, as with Triton's stub."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def log_settings_answer(settings: Settings) -> dict[str, Any]:
    """LogSettingsResponse's ``settings`` as ``{key: value}`` (the type picks the oneof)."""
    return {
        "log_file": settings.log_file,
        "log_info": settings.log_info,
        "log_warning": settings.log_warning,
        "log_error": settings.log_error,
        "log_verbose_level": settings.log_verbose,
        "log_format": settings.log_format,
    }
