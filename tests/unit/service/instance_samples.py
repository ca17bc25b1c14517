"""An instance's parts wired as ``pbd.instance.instance.Instance`` wires them, with no worker:
real shared memory, request table, releases and in-flight batches of a real config; what would
be sent to the worker is recorded instead (``told``, ``released``)."""

from __future__ import annotations

from pathlib import Path

from config_samples import parse

from pbd.instance.inflight import InFlightBatches
from pbd.instance.memory import InstanceMemory
from pbd.instance.requests import SentRequests
from pbd.modelconfig.model import ModelConfig
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.worker_client.releases import PendingReleases
from pbd_wire import worker_pb2 as wpb

DESCRIPTION = "instance 'm_0' of model 'm' version 1"


def model_config(extra: str = "") -> ModelConfig:
    """Model ``m``: input X and output Y, FP32 [2], no batching; ``extra`` config text."""
    return parse(
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n' + extra
    )


class Parts:
    """memory, releases, requests and batches of one instance; its worker is a list."""

    def __init__(self, shm_dir: Path, config: ModelConfig | None = None) -> None:
        self.config = config if config is not None else model_config()
        self.memory = InstanceMemory(f"pbdtest-{shm_dir.name}", Settings(shm_dir=shm_dir))
        self.told: list[wpb.DaemonToWorker] = []  # frames for the worker
        self.released: list[list[int]] = []  # Release frames sent after the delay
        self.capacity = 0  # times the dispatch heard that room came free
        self.releases = PendingReleases(self.released.append)
        self.requests = SentRequests(
            model_name=self.config.name,
            version=1,
            memory=self.memory,
            releases=self.releases,
            tell=self.told.append,
        )
        self.batches = InFlightBatches(
            config=self.config,
            version=1,
            description=DESCRIPTION,
            span_attributes={},
            memory=self.memory,
            requests=self.requests,
            releases=self.releases,
            stats=ModelStats(),
            on_capacity=self._on_capacity,
        )

    def _on_capacity(self) -> None:
        self.capacity += 1

    def close(self) -> None:
        self.memory.close()
