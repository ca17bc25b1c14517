"""Which queued requests make one batch: Triton's dynamic-batching rule, written once for both
places batches form (pure; no asyncio, no sockets).

Batches form in the daemon's scheduler (``pbd.scheduling.dynamic_batcher``, for requests that
go through the daemon) and in a worker (``pbd_worker.front_batcher``, for the requests front ends
send it directly). Both ask ``gather`` which of their queued requests, in service order, go
together:

- requests join while the sum of their batch dimensions (the first dimension of their inputs)
  stays within ``max_batch_size``, and while each is compatible with the first (same inputs
  with the same shapes past the batch dimension, same requested outputs, as Triton requires);
  the first one that is not starts the next batch;
- the batch is *closed* when nothing more can join it (full, or the next request does not
  fit): it goes now;
- else the caller waits, while the oldest request has waited less than
  ``max_queue_delay_microseconds``, for more requests, unless a ``preferred_batch_size`` is
  reached: then the longest prefix of that size goes now; once the delay is over, whatever was
  gathered goes.

``BatchingPolicy`` is a model's ``dynamic_batching`` as both batchers read it, with Triton's
semantics (``model_config.proto`` ModelDynamicBatching / ModelQueuePolicy):

- ``priority_levels`` N > 0: levels 1..N, 1 served first. A request's ``priority`` of 0, or
  above N, means ``default_priority_level``. Without levels there is one queue.
- each level has a ModelQueuePolicy (``priority_queue_policy[level]``, else
  ``default_queue_policy``): ``max_queue_size`` (0: unbounded), ``default_timeout_microseconds``
  (0: none), ``allow_timeout_override`` (a request's ``timeout`` may only shorten it) and
  ``timeout_action``: REJECT fails a request that waited past its timeout, DELAY serves it
  after every request of its level that has not timed out.
- ``max_queue_delay_microseconds``: how long the oldest request may wait for a batch to fill
  to a ``preferred_batch_size`` (or ``max_batch_size``).

``direct_batching`` says which of them a worker honours alone (all but ordered answers across
instances, which need one queue per model version: the daemon's). A worker bounds its own
queue at its share of ``max_queue_size`` (``queue_share``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def gather(
    items: Iterable[T],
    size_of: Callable[[T], int],
    signature_of: Callable[[T], Hashable],
    max_batch_size: int,
    preferred: tuple[int, ...],
) -> tuple[list[T], bool, list[T] | None]:
    """The batch ``items`` (in service order) start: (batch, closed, preferred prefix). It reads
    no further than the first item that does not join.

    ``closed``: nothing more can join. ``preferred prefix``: the longest prefix whose size is
    one of ``preferred``, if any."""
    limit = max(max_batch_size, 1)
    batch: list[T] = []
    size = 0
    best: list[T] | None = None
    first: Hashable = None
    for item in items:
        n = size_of(item)
        sig = signature_of(item)
        if batch and (size + n > limit or sig != first):
            return batch, True, best
        if not batch:
            first = sig
        batch.append(item)
        size += n
        if size in preferred:
            best = list(batch)
        if size >= limit:
            return batch, True, best
    return batch, False, best


@dataclass(frozen=True)
class QueuePolicy:
    max_queue_size: int = 0
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)

    def timeout_us(self, requested_us: int) -> int:
        """The timeout a request gets; 0: none."""
        shorter = self.default_timeout_us == 0 or requested_us < self.default_timeout_us
        if self.allow_timeout_override and requested_us > 0 and shorter:
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True)
class BatchingPolicy:
    max_batch_size: int = 0  # 0: one request per execute
    preferred: tuple[int, ...] = ()
    max_delay_us: int = 0
    preserve_ordering: bool = False
    levels: int = 0
    default_level: int = 0
    default_policy: QueuePolicy = QueuePolicy()
    level_policies: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def level_of(self, priority: int) -> int:
        if self.levels <= 0:
            return 0
        if priority == 0 or priority > self.levels:
            return self.default_level
        return priority

    def policy_of(self, level: int) -> QueuePolicy:
        return self.level_policies.get(level, self.default_policy)


def _queue_policy(raw: Mapping[str, Any]) -> QueuePolicy:
    return QueuePolicy(
        max_queue_size=int(raw.get("max_queue_size", 0) or 0),
        default_timeout_us=int(raw.get("default_timeout_microseconds", 0) or 0),
        allow_timeout_override=bool(raw.get("allow_timeout_override", False)),
        delay_on_timeout=raw.get("timeout_action", "REJECT") in ("DELAY", 1),
    )


def batching_policy(
    config: Mapping[str, Any], fallback_queue_size: int = 0
) -> BatchingPolicy | None:
    """The dynamic batcher's policy of a model's configuration (its JSON form, as
    ``ModelConfig.as_dict`` or a worker's ``model_config`` argument), or None when the model has
    no ``dynamic_batching``. ``fallback_queue_size`` (``--max-queue-size``) bounds levels whose
    policy sets none."""
    raw = config.get("dynamic_batching")
    if raw is None:
        return None
    default = _queue_policy(raw.get("default_queue_policy", {}))
    if default.max_queue_size == 0 and fallback_queue_size:
        default = QueuePolicy(
            fallback_queue_size,
            default.default_timeout_us,
            default.allow_timeout_override,
            default.delay_on_timeout,
        )
    levels = int(raw.get("priority_levels", 0) or 0)
    per_level = {
        int(level): _queue_policy(policy)
        for level, policy in (raw.get("priority_queue_policy") or {}).items()
    }
    return BatchingPolicy(
        max_batch_size=int(config.get("max_batch_size", 0) or 0),
        preferred=tuple(sorted(int(s) for s in raw.get("preferred_batch_size", []))),
        max_delay_us=int(raw.get("max_queue_delay_microseconds", 0) or 0),
        preserve_ordering=bool(raw.get("preserve_ordering", False)),
        levels=levels,
        default_level=int(raw.get("default_priority_level", 0) or 0) or (1 if levels else 0),
        default_policy=default,
        level_policies=per_level,
    )


def queue_full_message(name: str, waiting: int, limit: int) -> str:
    """Triton's words for a request its queue refused (``max_queue_size``), and how full it
    was; ``name``: "model 'm' version 1"."""
    return (
        f"Exceeds maximum queue size: {name} already has {waiting} requests "
        f"waiting (max_queue_size {limit})"
    )


def instance_count(config: Mapping[str, Any]) -> int:
    """How many instances a model's configuration (its completed JSON form) asks for: each
    group's ``count``, times its ``gpus`` when it names them."""
    total = 0
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1) or 1)
        total += count * max(len(group.get("gpus") or []), 1)
    return max(total, 1)


def queue_share(limit: int, instances: int) -> int:
    """An instance's share of a version's queue bound: with each worker holding its own
    queue, the version holds at most ``limit`` (rounded up to a whole number per instance)
    waiting when front ends spread the requests evenly, as Triton's one queue does."""
    return -(-limit // max(instances, 1)) if limit else 0


def direct_batching(config: Mapping[str, Any]) -> tuple[BatchingPolicy | None, str]:
    """The dynamic batching a worker does itself for its front ends' requests, from a model's
    configuration (its JSON form), or (None, why not): "" when it has no dynamic batching.
    Ordered answers across instances (``preserve_ordering``) need one queue per model
    version: the daemon's."""
    policy = batching_policy(config)
    if policy is None:
        return None, ""
    if policy.max_batch_size <= 0:
        return None, "dynamic batching without max_batch_size"
    if policy.preserve_ordering:
        return None, "dynamic batching with preserve_ordering"
    return policy, ""
