"""The small records of an instance that its version (dispatch, supervisor, scaler) and the
readers above (metrics, BLS) name: its state, its plan, and the error of a batch never sent."""

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


@dataclass(frozen=True)
class InstancePlan:
    name: str  # Triton's instance name: "<group>_<n>"
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int


class NotSent(PbdError):
    """The batch never reached the worker (its connection had closed): safe to run elsewhere."""
