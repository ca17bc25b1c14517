"""Trace settings: --trace-config parsing, Triton's sampling and per-model overrides."""

from __future__ import annotations

import pytest

from pbd.errors import PbdError
from pbd.tracing.settings import TraceSetting, TraceSettings, parse_trace_config


def test_trace_config_flags_and_env_form() -> None:
    config = parse_trace_config(
        ["level=TIMESTAMPS", "rate=4", "count=3", "opentelemetry,url=http://h:4317"]
    )
    assert config.setting == TraceSetting(("TIMESTAMPS",), 4, 3, 0)
    assert config.options == {"url": ["http://h:4317"]}
    joined = parse_trace_config(["level=TIMESTAMPS,opentelemetry,resource=a=b"])
    assert joined.options == {"resource": ["a=b"]}
    for bad in ("mode=triton", "rate=x", "level=LOUD", "color=red", "triton,file=f"):
        with pytest.raises(ValueError):
            parse_trace_config([bad])


def test_rate_samples_one_in_n_and_count_stops() -> None:
    setting = TraceSetting(("TIMESTAMPS",), rate=3, count=2)
    assert [setting.sample() for _ in range(9)] == [False, False, True] * 2 + [False] * 3
    assert setting.count == 0
    assert not any(TraceSetting((), rate=1).sample() for _ in range(3))
    assert not any(TraceSetting(("TIMESTAMPS",), rate=0).sample() for _ in range(3))


def test_model_overrides_follow_global_for_the_rest() -> None:
    settings = TraceSettings(parse_trace_config(["level=TIMESTAMPS", "rate=1"]))
    settings.update("m", {"trace_rate": ["2"]})
    settings.update("", {"trace_level": ["OFF"]})
    assert settings.answer("m")["trace_level"] == ["OFF"]
    assert settings.answer("m")["trace_rate"] == ["2"]
    settings.update("", {"trace_level": []})  # cleared: back to the command line's
    assert settings.answer("")["trace_level"] == ["TIMESTAMPS"]
    settings.update("m", {"trace_rate": []})
    assert settings.setting("m") is settings.global_setting
    with pytest.raises(PbdError, match="expect only 1 value for 'trace_rate'"):
        settings.update("", {"trace_rate": ["1", "2"]})
