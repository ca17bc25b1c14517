"""A model's ``dynamic_batching`` settings as the batcher uses them (pure; no asyncio).

Triton's semantics (``model_config.proto`` ModelDynamicBatching / ModelQueuePolicy):

- ``priority_levels`` N > 0: levels 1..N, 1 served first. A request's ``priority`` of 0, or
  above N, means ``default_priority_level``. Without levels there is one queue.
- each level has a ModelQueuePolicy (``priority_queue_policy[level]``, else
  ``default_queue_policy``): ``max_queue_size`` (0: unbounded), ``default_timeout_microseconds``
  (0: none), ``allow_timeout_override`` (a request's ``timeout`` may only shorten it) and
  ``timeout_action``: REJECT fails a request that waited past its timeout, DELAY serves it
  after every request of its level that has not timed out.
- ``max_queue_delay_microseconds``: how long the oldest request may wait for a batch to fill
  to a ``preferred_batch_size`` (or ``max_batch_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pbd.modelconfig.model import ModelConfig


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


def batching_policy(config: ModelConfig, fallback_queue_size: int = 0) -> BatchingPolicy | None:
    """The dynamic batcher's policy, or None when the model has no ``dynamic_batching``.
    ``fallback_queue_size`` (``--max-queue-size``) bounds levels whose policy sets none."""
    raw = config.as_dict.get("dynamic_batching")
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
        max_batch_size=config.max_batch_size,
        preferred=tuple(sorted(int(s) for s in raw.get("preferred_batch_size", []))),
        max_delay_us=int(raw.get("max_queue_delay_microseconds", 0) or 0),
        preserve_ordering=bool(raw.get("preserve_ordering", False)),
        levels=levels,
        default_level=int(raw.get("default_priority_level", 0) or 0) or (1 if levels else 0),
        default_policy=default,
        level_policies=per_level,
    )
