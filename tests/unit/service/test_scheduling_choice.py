"""Which scheduler a model's config picks, and whether it lets instances pipeline batches."""

from __future__ import annotations

import pytest

from pbd.modelconfig.parse import parse_model_config
from pbd.scheduling import make_scheduler
from pbd.scheduling.dynamic_batcher import DynamicBatcher
from pbd.scheduling.priority_queues import RequestQueue
from pbd.scheduling.sequence_batcher import SequenceBatcher

BASE = """
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


@pytest.mark.parametrize(
    ("extra", "kind", "pipelined"),
    [
        ("", RequestQueue, True),
        ("dynamic_batching { }", DynamicBatcher, False),
        ("sequence_batching { }", SequenceBatcher, True),
    ],
    ids=["default", "dynamic", "sequence"],
)
def test_the_config_picks_the_scheduler_and_its_pipelining(
    extra: str, kind: type, pipelined: bool
) -> None:
    config = parse_model_config(BASE + extra, model_name="m", source="config.pbtxt")
    scheduler = make_scheduler(config, "model 'm' version 1", 3)
    assert type(scheduler) is kind
    assert scheduler.pipelined is pipelined


@pytest.mark.parametrize(
    ("extra", "iterative"),
    [("sequence_batching { }", False), ("sequence_batching { iterative_sequence: true }", True)],
)
def test_iterative_sequence_makes_the_sequence_batcher_take_requests_back(
    extra: str, iterative: bool
) -> None:
    config = parse_model_config(BASE + extra, model_name="m", source="config.pbtxt")
    assert config.iterative_sequence is iterative
    scheduler = make_scheduler(config, "model 'm' version 1", 3)
    assert isinstance(scheduler, SequenceBatcher) and scheduler.iterative is iterative
