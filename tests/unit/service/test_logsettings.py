"""LogSettings checks, Triton's messages (the wrong-type cases tritonclient cannot send)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pbd.errors import Code, PbdError
from pbd.logsettings import HTTP, log_settings_answer, update_log_settings
from pbd.settings import Settings


@pytest.fixture
def settings() -> Iterator[Settings]:
    """Settings; the root logger (which an update reconfigures) is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield Settings()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"log_info": ("string_param", "yes")}, "expect boolean for 'log_info'"),
        ({"log_verbose_level": ("bool_param", True)}, "expect int32 for 'log_verbose_level'"),
        ({"log_format": ("uint32_param", 1)}, "expect string for 'log_format'"),
        ({"log_format": ("string_param", "x")}, "invalid argument for log_format, got: x"),
    ],
)
def test_wrong_values_are_invalid(settings: Settings, values: dict, message: str) -> None:
    with pytest.raises(PbdError) as info:
        update_log_settings(settings, values)
    assert info.value.code is Code.INVALID_ARG and info.value.message == message


def test_log_file_cannot_change(settings: Settings) -> None:
    with pytest.raises(PbdError) as info:
        update_log_settings(settings, {"log_file": ("string_param", "x")})
    assert info.value.code is Code.UNSUPPORTED


def test_update_then_answer(settings: Settings) -> None:
    update_log_settings(
        settings,
        {"log_verbose_level": ("uint32_param", 2), "log_format": ("string_param", "ISO8601")},
    )
    answer = log_settings_answer(settings)
    assert answer["log_verbose_level"] == 2 and answer["log_format"] == "ISO8601"
    assert logging.getLogger().level == logging.DEBUG


@pytest.mark.parametrize(
    ("values", "code", "message"),
    [
        ({"log_info": ("string_param", "yes")}, Code.INTERNAL,
         "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": (None, -1)}, Code.INTERNAL,
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_format": ("string_param", "x")}, Code.UNAVAILABLE,
         "invalid argument for --log_format, got: x"),
    ],
)  # fmt: skip
def test_http_words_them_as_tritons_http_front_end(
    settings: Settings, values: dict, code: Code, message: str
) -> None:
    with pytest.raises(PbdError) as info:
        update_log_settings(settings, values, HTTP)
    assert info.value.code is code and info.value.message == message


def test_keys_before_an_error_are_applied(settings: Settings) -> None:
    with pytest.raises(PbdError):
        update_log_settings(
            settings, {"log_format": ("string_param", "x"), "log_info": ("bool_param", False)}
        )
    assert settings.log_info is False
