"""Which scheduler a model version gets: Triton's ``scheduling_choice`` of its config."""

from __future__ import annotations

from pbd.modelconfig.model import SEQUENCE_IDLE_DEFAULT_US, ModelConfig
from pbd.scheduling.dynamic_batcher import DynamicBatcher
from pbd.scheduling.priority_queues import RequestQueue
from pbd.scheduling.scheduler import InstanceT, Scheduler
from pbd.scheduling.sequence_batcher import SequenceBatcher
from pbd_wire.batching import BatchingPolicy, QueuePolicy, batching_policy


def make_scheduler(config: ModelConfig, name: str, max_queue_size: int) -> Scheduler[InstanceT]:
    """``dynamic_batching``: the dynamic batcher; ``sequence_batching``: the sequence batcher;
    neither: the default scheduler. ``max_queue_size`` is ``--max-queue-size``."""
    policy = batching_policy(config.as_dict, max_queue_size)
    if policy is not None:
        return DynamicBatcher(name, policy)
    sequence = config.as_dict.get("sequence_batching")
    if sequence is not None:
        idle = int(sequence.get("max_sequence_idle_microseconds", 0) or 0)
        return SequenceBatcher(
            name,
            config.name,
            BatchingPolicy(config.max_batch_size, default_policy=QueuePolicy(max_queue_size)),
            idle or SEQUENCE_IDLE_DEFAULT_US,
            config.iterative_sequence,
        )
    return RequestQueue(name, max_queue_size)
