"""A model's dynamic_batching settings read into the batcher's policy."""

from __future__ import annotations

from pbd.modelconfig.parse import parse_model_config
from pbd.scheduling.batching_policy import QueuePolicy, batching_policy


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
    policy = batching_policy(config, fallback_queue_size=99)
    assert policy is not None
    assert (policy.max_batch_size, policy.preferred, policy.max_delay_us) == (8, (8,), 100)
    assert policy.level_of(0) == 2 and policy.level_of(1) == 1
    assert policy.policy_of(1) == QueuePolicy(0, 7, False, True)
    assert policy.policy_of(2).max_queue_size == 5
