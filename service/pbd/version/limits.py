"""Per-model limits on a version's instances and queue: config parameters over daemon flags.

- ``pbd.execute_timeout_s`` (``--execute-timeout-secs``): longest ``execute()``; longer and
  the instance is killed and replaced.
- ``pbd.memory_limit_bytes`` (``--instance-memory-limit-bytes``): private memory each worker
  may use; past it the worker exits and is replaced.
- ``dynamic_batching { default_queue_policy { max_queue_size } }`` (``--max-queue-size``):
  requests that may wait for an instance.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pbd.errors import invalid_arg
from pbd.modelconfig.model import ModelConfig
from pbd.settings import Settings
from pbd.version.autoscale import ScalingPolicy, parse_policy

if TYPE_CHECKING:
    from pbd.instance.records import InstancePlan


@dataclass(frozen=True)
class VersionLimits:
    execute_timeout: float = 0.0
    memory_limit: int = 0
    max_queue_size: int = 0


def queue_limit(config: ModelConfig, settings: Settings) -> int:
    """Triton's ``max_queue_size`` when the config sets it, else ``--max-queue-size``."""
    policy = config.as_dict.get("dynamic_batching", {}).get("default_queue_policy", {})
    configured = int(policy.get("max_queue_size", 0) or 0)
    return configured if configured > 0 else settings.max_queue_size


def version_limits(config: ModelConfig, settings: Settings, source: str) -> VersionLimits:
    """The limits of ``config`` (its file is ``source``); INVALID_ARG for a bad parameter."""
    params = config.parameters
    try:
        timeout = float(params.get("pbd.execute_timeout_s", settings.execute_timeout_secs))
    except ValueError:
        raise invalid_arg(
            f"{source}: parameter 'pbd.execute_timeout_s' must be a number of seconds"
        ) from None
    try:
        memory = int(params.get("pbd.memory_limit_bytes", settings.instance_memory_limit_bytes))
    except ValueError:
        memory = -1
    if memory < 0:
        raise invalid_arg(
            f"{source}: parameter 'pbd.memory_limit_bytes' must be a whole number of bytes"
        )
    return VersionLimits(timeout, memory, queue_limit(config, settings))


def scaling_policy(
    config: ModelConfig, settings: Settings, plans: list[InstancePlan], source: str
) -> ScalingPolicy:
    """The version's load-driven scaling, from its parameters over the daemon's defaults; a
    CPU-only model scales to at most one instance per core."""
    cpu_only = all(p.kind != "GPU" for p in plans)
    return parse_policy(
        config.parameters,
        initial=len(plans),
        cpu_cap=(os.cpu_count() or 1) if cpu_only else None,
        source=source,
        defaults=ScalingPolicy(
            enabled=settings.autoscale,
            target_inflight=settings.autoscale_target_inflight,
            scale_down_window_s=settings.autoscale_scale_down_delay_secs,
            scale_down_delay_s=settings.autoscale_scale_down_delay_secs,
        ),
    )
