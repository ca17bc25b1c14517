"""Per-model limits: config parameters over flags."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.modelconfig.parse import parse_model_config
from pbd.settings import Settings
from pbd.version.limits import VersionLimits, version_limits


def _config(extra: str = ""):
    text = f'name: "m" backend: "python" {extra}'
    return parse_model_config(text, model_name="m", source="m/config.pbtxt")


def test_config_overrides_flags():
    settings = Settings(
        execute_timeout_secs=5.0, instance_memory_limit_bytes=1 << 30, max_queue_size=8
    )
    assert version_limits(_config(), settings, "src") == VersionLimits(5.0, 1 << 30, 8)
    extra = (
        'parameters { key: "pbd.memory_limit_bytes" value: { string_value: "1024" } } '
        "dynamic_batching { default_queue_policy { max_queue_size: 3 } }"
    )
    limits = version_limits(_config(extra), settings, "src")
    assert (limits.memory_limit, limits.max_queue_size) == (1024, 3)


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_memory_limit_is_refused(value: str):
    extra = f'parameters {{ key: "pbd.memory_limit_bytes" value: {{ string_value: "{value}" }} }}'
    with pytest.raises(PbdError) as info:
        version_limits(_config(extra), Settings(), "m/config.pbtxt")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "m/config.pbtxt: parameter 'pbd.memory_limit_bytes' must be a whole number of bytes"
    )
