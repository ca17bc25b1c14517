"""The small records every part of ``pbd.instances`` (and its users) shares.

Kept apart so that the version, its dispatch, its supervisor, the scaler and the hooks can all
name an instance's state and plan without importing each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pbd.errors import PbdError


class State(enum.Enum):
    """An instance's life: STARTING until initialize() returned, READY while it serves, DEAD
    once its worker is gone (the supervisor may replace it), STOPPED once unloaded."""

    STARTING = "STARTING"
    READY = "READY"
    DEAD = "DEAD"
    STOPPED = "STOPPED"


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


@dataclass(frozen=True)
class InstancePlan:
    name: str  # Triton's instance name: "<group>_<n>"
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int


class NotSent(PbdError):
    """The batch never reached the worker (its connection had closed): safe to run elsewhere."""
