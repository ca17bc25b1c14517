"""A stand-in for ``pbd.instances.instance.Instance`` as the modules that build and settle its
batches see it (``messages.ExecutingInstance``, ``inflight.SettlingInstance``): real shared
memory and streams, no worker; batch releases are recorded, not sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pbd.instances.error_log import ErrorBucket
from pbd.instances.memory import InstanceMemory
from pbd.instances.streaming import InstanceStreams
from pbd.stats import ModelStats


@dataclass
class FakeConfig:
    name: str = "m"
    iterative_sequence: bool = False
    max_batch_size: int = 0


@dataclass
class FakeInstance:
    memory: InstanceMemory
    config: FakeConfig = field(default_factory=FakeConfig)
    version: int = 1
    released: list[tuple[int, bool]] = field(default_factory=list)  # (batch id, worker holds)
    error_bucket: ErrorBucket = field(default_factory=ErrorBucket)
    stats: ModelStats = field(default_factory=ModelStats)
    span_attributes: dict[str, object] = field(default_factory=dict)
    streams: InstanceStreams = field(init=False)
    conn: Any = None

    def __post_init__(self) -> None:
        self.streams = InstanceStreams(self)  # type: ignore[arg-type]

    def describe(self) -> str:
        return "instance m_0"

    def release_batch(self, batch_id: int, blocks: list[Any], worker_holds: bool = True) -> None:
        self.released.append((batch_id, worker_holds))
