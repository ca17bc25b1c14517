"""The scaling decision on recorded load traces, without processes."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pbd.errors import PbdError
from pbd.version.autoscale import SAMPLE_INTERVAL_S, ScalingPolicy, decide, parse_policy

POLICY = ScalingPolicy(
    enabled=True,
    min_instances=1,
    max_instances=4,
    target_inflight=2.0,
    burst_window_s=1.0,
    scale_down_window_s=5.0,
    scale_down_delay_s=5.0,
    max_starting=2,
)


def simulate(
    policy: ScalingPolicy, load: Callable[[float], float], seconds: float, start: int = 1
) -> list[tuple[float, int]]:
    """Replay ``load(t)``: decisions take effect at once, as if instances started instantly.
    Returns (time, count) at every change."""
    samples: list[tuple[float, float]] = []
    current, last_up, changes = start, -math.inf, [(0.0, start)]
    for step in range(int(seconds / SAMPLE_INTERVAL_S)):
        now = step * SAMPLE_INTERVAL_S
        samples.append((now, load(now)))
        samples = [s for s in samples if now - s[0] <= policy.scale_down_window_s + 1]
        decision = decide(policy, samples, now, current, last_up)
        if decision.desired != current:
            if decision.desired > current:
                last_up = now
            current = decision.desired
            changes.append((round(now, 2), current))
    return changes


def counts(changes: list[tuple[float, int]]) -> list[int]:
    return [c for _, c in changes]


def test_step_up_reacts_within_the_burst_window():
    changes = simulate(POLICY, lambda t: 8.0 if t >= 2.0 else 1.0, 6.0)
    assert counts(changes) == [1, 2, 3, 4]
    first_up = changes[1][0]
    assert 2.0 <= first_up <= 3.0  # the mean crosses 2 per instance within the 1 s window
    assert changes[-1][0] <= 4.0


def test_a_burst_is_capped_by_max_starting_and_max_instances():
    changes = simulate(POLICY, lambda t: 100.0, 3.0)
    steps = [b - a for a, b in zip(counts(changes), counts(changes)[1:], strict=False)]
    assert max(steps) <= POLICY.max_starting
    assert counts(changes)[-1] == POLICY.max_instances


def test_slow_ramp_adds_one_instance_at_a_time():
    changes = simulate(POLICY, lambda t: t / 2.0, 16.0)
    assert counts(changes) == [1, 2, 3, 4]


def test_drop_to_idle_waits_for_the_delay_then_goes_to_the_floor():
    changes = simulate(POLICY, lambda t: 8.0 if t < 3.0 else 0.0, 20.0)
    assert counts(changes)[:3] == [1, 3, 4]  # +max_starting at a time, up to the ceiling
    down_at, final = changes[-1]
    assert final == POLICY.min_instances
    assert down_at >= 3.0 + POLICY.scale_down_window_s  # the peak must leave the long window


def test_oscillating_load_does_not_flap():
    changes = simulate(POLICY, lambda t: 6.0 if int(t / 2) % 2 == 0 else 0.0, 30.0)
    ups_then_downs = counts(changes)
    assert ups_then_downs == sorted(ups_then_downs), ups_then_downs  # only ever grows


def test_scale_to_zero_and_cold_start():
    policy = ScalingPolicy(**{**POLICY.__dict__, "min_instances": 0})
    changes = simulate(policy, lambda t: 0.0 if t < 12.0 else 1.0, 13.0)
    assert counts(changes) == [1, 0, 1]
    assert changes[2][0] == 12.0  # the first waiting request starts an instance at once
    decision = decide(policy, [(0.0, 3.0)], 0.0, 0, -math.inf)
    assert decision.desired == 2 and "cold start" in decision.reason


def test_parse_policy_reads_config_parameters_and_checks_them():
    params = {
        "pbd.autoscale": "true",
        "pbd.min_instances": "0",
        "pbd.max_instances": "8",
        "pbd.target_inflight": "4",
        "pbd.burst_window_ms": "500",
        "other": "kept for the model",
    }
    policy = parse_policy(params, initial=1, cpu_cap=2, source="m/config.pbtxt")
    assert (policy.enabled, policy.min_instances, policy.max_instances) == (True, 0, 2)
    assert policy.burst_window_s == 0.5 and policy.target_inflight == 4.0
    assert parse_policy({}, initial=3, cpu_cap=None, source="m").enabled is False
    bad = [
        ({"pbd.autoscale": "maybe"}, "expected true or false"),
        ({"pbd.autoscale": "true", "pbd.min_instances": "x"}, "expected an integer"),
        ({"pbd.autoscale": "true", "pbd.min_instances": "5"}, "is above"),
        ({"pbd.autscale": "true"}, "unknown parameter 'pbd.autscale'"),
        ({"pbd.autoscale": "true", "pbd.target_inflight": "-1"}, "must be >= 0"),
    ]
    for parameters, message in bad:
        with pytest.raises(PbdError, match=message):
            parse_policy(parameters, initial=2, cpu_cap=None, source="m/config.pbtxt")


def test_daemon_wide_defaults_apply_unless_the_model_overrides_them():
    defaults = ScalingPolicy(enabled=True, target_inflight=3.0, scale_down_delay_s=7.0)
    policy = parse_policy({}, initial=2, cpu_cap=None, source="m", defaults=defaults)
    assert policy.enabled and policy.target_inflight == 3.0 and policy.scale_down_delay_s == 7.0
    assert (policy.min_instances, policy.max_instances) == (1, 2)
    off = parse_policy(
        {"pbd.autoscale": "false"}, initial=2, cpu_cap=None, source="m", defaults=defaults
    )
    assert not off.enabled
