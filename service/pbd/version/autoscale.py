"""Load-driven instance counts: the policy, and the decision as a pure function.

Signals are samples of *load* = requests queued + requests in flight, for one model version,
taken every ``SAMPLE_INTERVAL_S``. Scaling up looks at the **mean** load over a short window
(a burst is seen within about a second); scaling down looks at the **peak** load over a long
window and only after ``scale_down_delay_s`` without a scale-up. Mean-up / peak-down is the
hysteresis: oscillating load keeps the peak high, so the count does not flap.

Config keys (``parameters`` in config.pbtxt, string values), all optional:

==============================  =========  =================================================
key                             default    meaning
==============================  =========  =================================================
``pbd.autoscale``               ``false``  turn load-driven scaling on for this model
``pbd.min_instances``           ``1``      floor; ``0`` allows scale to zero
``pbd.max_instances``           group sum  ceiling (KIND_CPU also capped at the core count)
``pbd.target_inflight``         ``1``      load one instance should carry
``pbd.burst_window_ms``         ``1000``   window of the mean that drives scale-up
``pbd.scale_down_window_s``     ``30``     window of the peak that drives scale-down
``pbd.scale_down_delay_s``      ``30``     quiet time after a scale-up before scaling down
``pbd.max_starting``            ``2``      most instances starting at once
``pbd.cold_start_timeout_s``    ``30``     how long a request waits at zero instances
==============================  =========  =================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pbd.errors import invalid_arg

SAMPLE_INTERVAL_S = 0.05
PREFIX = "pbd."


@dataclass(frozen=True)
class ScalingPolicy:
    enabled: bool = False
    min_instances: int = 1
    max_instances: int = 1
    target_inflight: float = 1.0
    burst_window_s: float = 1.0
    scale_down_window_s: float = 30.0
    scale_down_delay_s: float = 30.0
    max_starting: int = 2
    cold_start_timeout_s: float = 30.0


_KEYS = {
    "autoscale": ("enabled", "bool"),
    "min_instances": ("min_instances", "int"),
    "max_instances": ("max_instances", "int"),
    "target_inflight": ("target_inflight", "float"),
    "burst_window_ms": ("burst_window_s", "ms"),
    "scale_down_window_s": ("scale_down_window_s", "float"),
    "scale_down_delay_s": ("scale_down_delay_s", "float"),
    "max_starting": ("max_starting", "int"),
    "cold_start_timeout_s": ("cold_start_timeout_s", "float"),
}
# pbd.* keys that are not about scaling, read elsewhere.
_OTHER_KEYS = ("execute_timeout_s", "memory_limit_bytes")


def _value(key: str, text: str, kind: str, source: str) -> object:
    where = f"{source}: parameter '{PREFIX}{key}'"
    if kind == "bool":
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise invalid_arg(f"{where}: expected true or false, got '{text}'")
    try:
        number = int(text) if kind == "int" else float(text)
    except ValueError:
        raise invalid_arg(
            f"{where}: expected {'an integer' if kind == 'int' else 'a number'}, got '{text}'"
        ) from None
    if number < 0 or (isinstance(number, float) and not math.isfinite(number)):
        raise invalid_arg(f"{where}: must be >= 0, got '{text}'")
    return number / 1000.0 if kind == "ms" else number


def parse_policy(
    parameters: Mapping[str, str],
    *,
    initial: int,
    cpu_cap: int | None,
    source: str,
    defaults: ScalingPolicy | None = None,
) -> ScalingPolicy:
    """The policy of one model. ``initial`` is the instance_group count (the starting number
    and the default ceiling); ``cpu_cap`` caps KIND_CPU models at the machine's cores;
    ``defaults`` are the daemon-wide ones (``pbd serve --autoscale...``)."""
    values: dict[str, object] = dict((defaults or ScalingPolicy()).__dict__)
    values.update(max_instances=initial, min_instances=min(1, initial))
    for name, text in parameters.items():
        if not name.startswith(PREFIX):
            continue
        key = name[len(PREFIX) :]
        if key in _OTHER_KEYS:
            continue
        if key not in _KEYS:
            known = ", ".join(PREFIX + k for k in _KEYS)
            raise invalid_arg(f"{source}: unknown parameter '{name}' (known: {known})")
        field_name, kind = _KEYS[key]
        values[field_name] = _value(key, text, kind, source)
    policy = ScalingPolicy(**values)  # type: ignore[arg-type]
    if not policy.enabled:
        return policy
    if policy.max_instances < 1:
        raise invalid_arg(f"{source}: '{PREFIX}max_instances' must be >= 1")
    if policy.min_instances > policy.max_instances:
        raise invalid_arg(
            f"{source}: '{PREFIX}min_instances' ({policy.min_instances}) is above "
            f"'{PREFIX}max_instances' ({policy.max_instances})"
        )
    if policy.target_inflight <= 0 or policy.burst_window_s <= 0 or policy.max_starting < 1:
        raise invalid_arg(
            f"{source}: '{PREFIX}target_inflight', '{PREFIX}burst_window_ms' and "
            f"'{PREFIX}max_starting' must be > 0"
        )
    if cpu_cap is not None and policy.max_instances > cpu_cap:
        policy = ScalingPolicy(
            **{**policy.__dict__, "max_instances": max(cpu_cap, policy.min_instances)}
        )
    return policy


@dataclass(frozen=True)
class Decision:
    desired: int
    reason: str


def _window(samples: Sequence[tuple[float, float]], now: float, seconds: float) -> list[float]:
    return [load for t, load in samples if now - t <= seconds]


def decide(
    policy: ScalingPolicy,
    samples: Sequence[tuple[float, float]],
    now: float,
    current: int,
    last_scale_up: float,
) -> Decision:
    """How many instances there should be. ``samples`` are ``(time, load)``; ``current``
    counts ready and starting instances; ``last_scale_up`` is when the count last grew."""
    burst = _window(samples, now, policy.burst_window_s)
    longer = _window(samples, now, policy.scale_down_window_s)
    latest = samples[-1][1] if samples else 0.0
    target = policy.target_inflight
    if current == 0 and latest > 0:
        want = max(1, policy.min_instances, math.ceil(latest / target))
        want = min(want, policy.max_instances, policy.max_starting)
        return Decision(want, f"cold start: {latest:g} request(s) waiting at zero instances")
    if current < policy.min_instances:
        return Decision(policy.min_instances, f"below the floor of {policy.min_instances}")
    mean = sum(burst) / len(burst) if burst else 0.0
    up = math.ceil(mean / target - 1e-9)
    if up > current and current < policy.max_instances:
        want = min(up, policy.max_instances, current + policy.max_starting)
        return Decision(
            want,
            f"load {mean:.2f} (mean over {policy.burst_window_s:g}s) needs {up} at "
            f"{target:g} per instance",
        )
    peak = max(longer) if longer else 0.0
    down = max(policy.min_instances, math.ceil(peak / target - 1e-9))
    quiet = now - last_scale_up >= policy.scale_down_delay_s
    covered = bool(samples) and now - samples[0][0] >= policy.scale_down_window_s
    if down < current and quiet and covered:
        return Decision(
            down,
            f"peak load {peak:g} over {policy.scale_down_window_s:g}s needs {down} at "
            f"{target:g} per instance",
        )
    return Decision(current, "steady")
