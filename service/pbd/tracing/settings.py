"""Trace settings as Triton keeps them: global values, per-model overrides, and sampling.

``trace_level`` (OFF, or TIMESTAMPS and/or TENSORS), ``trace_rate`` (trace one request in
every N; 0 traces none), ``trace_count`` (traces still to take; -1 = no limit) and
``log_frequency`` (kept and answered; spans leave through the batch processor, not a file).
A model's setting is the global one with the fields that model set itself; clearing a field
(an empty value list) makes it follow the global one again. Each setting has its own sample
counter, as in Triton: a model without overrides shares the global counter.

Pure: no OpenTelemetry here. ``sample(model)`` is the only call on the request path: a dict
lookup, a counter and a modulo, so an untraced request creates no span object at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pbd.errors import Code, PbdError, invalid_arg

LEVELS = ("TIMESTAMPS", "TENSORS")
MODE = "opentelemetry"
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1


@dataclass
class TraceSetting:
    level: tuple[str, ...] = ()  # () = OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    sampled: int = field(default=0, compare=False)  # requests seen (Triton's sample counter)

    def sample(self) -> bool:
        if not self.level or self.rate == 0 or self.count == 0:
            return False
        self.sampled += 1
        if self.sampled % self.rate:
            return False
        if self.count > 0:
            self.count -= 1
        return True


@dataclass
class TraceConfig:
    """What ``--trace-config`` gave: the starting global setting and OpenTelemetry options
    (``opentelemetry,<key>=<value>``: url, resource, bsp_*), answered back by TraceSetting."""

    setting: TraceSetting = field(default_factory=TraceSetting)
    options: dict[str, list[str]] = field(default_factory=dict)


def parse_trace_config(entries: Iterable[str]) -> TraceConfig:
    """Triton's ``--trace-config`` values: ``level=TIMESTAMPS``, ``rate=1``, ``count=100``,
    ``log-frequency=0``, ``mode=opentelemetry``, ``opentelemetry,url=...``. Entries may also
    come comma-joined (``PBD_TRACE_CONFIG``): a bare ``opentelemetry`` prefixes the next one."""
    config = TraceConfig()
    tokens = [t.strip() for entry in entries for t in entry.split(",") if t.strip()]
    prefix = ""
    for token in tokens:
        if token in (MODE, "triton") and "=" not in token:
            prefix = token
            continue
        scope, prefix = prefix, ""
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"--trace-config {token!r}: expected <key>=<value>")
        if scope == "triton":
            raise ValueError("--trace-config triton,...: pbd traces with OpenTelemetry only")
        if scope == MODE:
            config.options.setdefault(key, []).append(value)
            continue
        s = config.setting
        if key == "mode":
            if value != MODE:
                raise ValueError(f"--trace-config mode={value}: pbd supports mode={MODE} only")
        elif key == "level":
            s.level = () if value.upper() == "OFF" else _levels(s.level, value.upper())
        elif key == "rate":
            s.rate = _number("rate", value, 0, _UINT32_MAX)
        elif key == "count":
            s.count = _number("count", value, -1, _INT32_MAX)
        elif key == "log-frequency":
            s.log_frequency = _number("log-frequency", value, 0, _UINT32_MAX)
        else:
            raise ValueError(f"--trace-config: unknown key {key!r}")
    return config


def _levels(current: tuple[str, ...], value: str) -> tuple[str, ...]:
    if value not in LEVELS:
        raise ValueError(f"--trace-config level={value}: expected OFF, TIMESTAMPS or TENSORS")
    return tuple(lv for lv in LEVELS if lv in current or lv == value)


def _number(key: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--trace-config {key}={text}: not a number") from None
    if not low <= value <= high:
        raise ValueError(f"--trace-config {key}={text}: out of range [{low}, {high}]")
    return value


class TraceSettings:
    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config or TraceConfig()
        self.global_setting = self.config.setting
        self._startup = dataclasses.replace(self.global_setting)
        self._models: dict[str, TraceSetting] = {}
        self._overridden: dict[str, set[str]] = {}  # model -> fields it set itself

    def setting(self, model: str) -> TraceSetting:
        return self._models.get(model, self.global_setting) if model else self.global_setting

    def sample(self, model: str) -> bool:
        return self._models.get(model, self.global_setting).sample()

    def update(self, model: str, values: Mapping[str, Sequence[str]]) -> None:
        """Apply a TraceSetting request's ``settings`` (Triton's checks and messages)."""
        if "trace_file" in values:
            raise PbdError(
                Code.UNSUPPORTED,
                "trace file location can not be updated through network protocol",
            )
        changes: dict[str, object | None] = {}  # None: clear the field
        if "trace_level" in values:
            changes["level"] = _request_level(values["trace_level"])
        for key, name, low, high in (
            ("trace_rate", "rate", 0, _UINT32_MAX),
            ("trace_count", "count", -1, _INT32_MAX),
            ("log_frequency", "log_frequency", 0, _UINT32_MAX),
        ):
            if key in values:
                changes[name] = _request_number(key, values[key], low, high)
        if model:
            self._update_model(model, changes)
            return
        for name, value in changes.items():
            # Cleared global fields go back to what the command line set.
            value = getattr(self._startup, name) if value is None else value
            setattr(self.global_setting, name, value)
            for other, setting in self._models.items():
                if name not in self._overridden[other]:
                    setattr(setting, name, value)

    def _update_model(self, model: str, changes: Mapping[str, object | None]) -> None:
        setting = self._models.get(model)
        if setting is None:
            setting = dataclasses.replace(self.global_setting, sampled=0)
            self._models[model] = setting
            self._overridden[model] = set()
        overridden = self._overridden[model]
        for name, value in changes.items():
            if value is None:
                overridden.discard(name)
                setattr(setting, name, getattr(self.global_setting, name))
            else:
                overridden.add(name)
                setattr(setting, name, value)
        if not overridden:  # follows the global setting (and its counter) again
            del self._models[model], self._overridden[model]

    def answer(self, model: str) -> dict[str, list[str]]:
        """TraceSettingResponse's ``settings``, as Triton answers in OpenTelemetry mode (no
        trace_file or log_frequency there, the --trace-config opentelemetry options instead)."""
        s = self.setting(model)
        out = {
            "trace_level": list(s.level) or ["OFF"],
            "trace_rate": [str(s.rate)],
            "trace_count": [str(s.count)],
            "trace_mode": [MODE],
        }
        for key, values in self.config.options.items():
            out[key] = list(values)
        return out


def _request_level(values: Sequence[str]) -> tuple[str, ...] | None:
    if not values:
        return None
    if "OFF" in values:
        if len(values) != 1:
            raise invalid_arg("Expect only one trace level 'OFF' is specified")
        return ()
    # Triton ignores level names it does not know.
    return tuple(lv for lv in LEVELS if lv in values)


def _request_number(key: str, values: Sequence[str], low: int, high: int) -> int | None:
    if not values:
        return None
    if len(values) != 1:
        raise invalid_arg(f"expect only 1 value for '{key}'")
    text = values[0]
    try:
        value = int(text.strip())
    except ValueError:
        raise invalid_arg(f"Unable to parse '{key}', got: {text}") from None
    if key == "trace_count" and value < low:
        raise invalid_arg(f"Unable to parse '{key}'. Expecting value >= {low}, got: {text}")
    if not low <= value <= high:
        raise invalid_arg(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return value
