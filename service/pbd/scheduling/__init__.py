"""Scheduling: the queue between a model version's callers and its instances.

``scheduler`` draws the contract the dispatcher sees (``Scheduler``, ``Placement``, ``Batch``);
``choice.make_scheduler`` picks one of Triton's schedulers from a model's config: the default
queue (``priority_queues``), the dynamic batcher (``dynamic_batcher``, with its policy in
``batching_policy``) or the sequence batcher (``sequence_batcher``). Nothing here imports
``pbd.instance``: instances are known only through the ``Schedulable`` protocol.
"""

from pbd.scheduling.choice import make_scheduler
from pbd.scheduling.scheduler import Batch, Placement, Scheduler, WorkItem, wait_result

__all__ = ["Batch", "Placement", "Scheduler", "WorkItem", "make_scheduler", "wait_result"]
