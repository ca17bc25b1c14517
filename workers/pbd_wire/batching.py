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

``DirectBatching`` is the part of a model's ``dynamic_batching`` a worker can honour by itself
(sizes and the delay): a version whose settings need more (priority levels, queue policies,
ordered responses across instances) keeps its requests in the daemon's queue.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
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
class DirectBatching:
    """A ``dynamic_batching`` a worker forms batches for itself, from every link's requests."""

    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_delay_us: int = 0


def direct_batching(config: Mapping[str, Any]) -> tuple[DirectBatching | None, str]:
    """The worker-side batching of a model's configuration (its JSON form), or (None, why
    not): "" when it has no dynamic batching at all."""
    raw = config.get("dynamic_batching")
    if raw is None:
        return None, ""
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    if max_batch_size <= 0:
        return None, "dynamic batching without max_batch_size"
    if int(raw.get("priority_levels", 0) or 0):
        return None, "dynamic batching with priority levels"
    if bool(raw.get("preserve_ordering", False)):
        return None, "dynamic batching with preserve_ordering"
    if raw.get("priority_queue_policy") or _queue_policy_set(raw.get("default_queue_policy")):
        return None, "dynamic batching with a queue policy"
    preferred = tuple(sorted(int(s) for s in raw.get("preferred_batch_size", []) or []))
    delay = int(raw.get("max_queue_delay_microseconds", 0) or 0)
    return DirectBatching(max_batch_size, preferred, delay), ""


def _queue_policy_set(raw: Mapping[str, Any] | None) -> bool:
    """Whether a ModelQueuePolicy asks for anything (a size bound, a timeout, a request's own
    timeout)."""
    if not raw:
        return False
    size = int(raw.get("max_queue_size", 0) or 0)
    timeout = int(raw.get("default_timeout_microseconds", 0) or 0)
    return bool(size or timeout or raw.get("allow_timeout_override"))
