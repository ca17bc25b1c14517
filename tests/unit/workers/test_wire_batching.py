"""A model's dynamic_batching settings read into the batchers' policy, and which of them a
worker honours alone (``pbd_wire.batching``)."""

from __future__ import annotations

import pytest

from pbd.modelconfig.parse import parse_model_config
from pbd_wire.batching import (
    QueuePolicy,
    batching_policy,
    direct_batching,
    instance_count,
    queue_full_message,
    queue_share,
)


def test_policy_from_config_text() -> None:
    config = parse_model_config(
        """
        backend: "python"
        max_batch_size: 8
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        dynamic_batching {
          max_queue_delay_microseconds: 100
          priority_levels: 2
          default_priority_level: 2
          default_queue_policy { max_queue_size: 5 }
          priority_queue_policy {
            key: 1 value { timeout_action: DELAY default_timeout_microseconds: 7 }
          }
        }
        """,
        model_name="m",
        source="config.pbtxt",
    )
    policy = batching_policy(config.as_dict, fallback_queue_size=99)
    assert policy is not None
    assert (policy.max_batch_size, policy.preferred, policy.max_delay_us) == (8, (8,), 100)
    assert policy.level_of(0) == 2 and policy.level_of(1) == 1
    assert policy.policy_of(1) == QueuePolicy(0, 7, False, True)
    assert policy.policy_of(2).max_queue_size == 5


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({}, ""),
        ({"max_batch_size": 4, "dynamic_batching": {}}, None),
        ({"max_batch_size": 0, "dynamic_batching": {}}, "without max_batch_size"),
        ({"max_batch_size": 4, "dynamic_batching": {"priority_levels": 2}}, None),
        ({"max_batch_size": 4, "dynamic_batching": {"preserve_ordering": True}}, "preserve"),
        (
            {
                "max_batch_size": 4,
                "dynamic_batching": {"default_queue_policy": {"max_queue_size": 3}},
            },
            None,  # each worker bounds its own queue at its share
        ),
        (
            {
                "max_batch_size": 4,
                "dynamic_batching": {"default_queue_policy": {"allow_timeout_override": True}},
            },
            None,
        ),
    ],
)
def test_which_dynamic_batching_a_worker_honours_alone(
    config: dict[str, object], why: str | None
) -> None:
    policy, refusal = direct_batching(config)
    if why is None:
        assert policy is not None and refusal == ""
    else:
        assert policy is None and why in refusal


def test_a_queue_bound_is_shared_by_the_versions_instances() -> None:
    assert queue_share(0, 3) == 0  # unbounded
    assert queue_share(8, 2) == 4
    assert queue_share(5, 2) == 3  # rounded up: never 0 for a bound
    assert queue_share(1, 4) == 1
    assert instance_count({}) == 1
    config = {"instance_group": [{"count": 2, "kind": "KIND_CPU"}, {"count": 3, "gpus": [0, 1]}]}
    assert instance_count(config) == 8


def test_the_full_queue_message_is_the_daemons_and_tritons() -> None:
    assert queue_full_message("model 'm' version 1", 4, 8) == (
        "Exceeds maximum queue size: model 'm' version 1 already has 4 requests waiting "
        "(max_queue_size 8)"
    )
