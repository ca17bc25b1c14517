"""What the edges' other routes need of the daemon: model control, metadata, statistics,
shared-memory registration, settings (every gRPC RPC and HTTP route besides inference).

``pbd.dataplane.DataPlane`` is the one implementation, in the daemon. The edges (``pbd.grpc``,
``pbd.http``) are written against this protocol, not against the daemon's classes, so that a
front-end process, which runs the same edges over its ``InferencePlane`` and passes every
other request to the daemon whole, imports nothing of the daemon's models, instances or
queues (``tests/unit/test_import_graph.py`` holds it to that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pbd.inference_plane import ModelPlane
from pbd.logsettings import GRPC, Wording
from pbd.memory.client_shm import CudaRegion, SystemRegion
from pbd.modelconfig.model import ModelConfig
from pbd.stats import ModelStats
from pbd.types import IndexEntry

# A request's parameters as both bindings give them: name -> (kind, value).
Params = Mapping[str, tuple[str | None, Any]]


class ControlPlane(ModelPlane, Protocol):
    # -- health and metadata
    def server_live(self) -> bool: ...

    def server_ready(self) -> bool: ...

    def server_metadata(self) -> tuple[str, str, tuple[str, ...]]: ...

    async def model_ready_checked(self, name: str, version: str) -> bool: ...

    def model_metadata(self, name: str, version: str) -> tuple[ModelConfig, list[str]]: ...

    async def model_statistics(
        self, name: str, version: str
    ) -> list[tuple[str, int, ModelStats]]: ...

    # -- the repository
    def repository_index(self, repository_name: str, ready_only: bool) -> list[IndexEntry]: ...

    async def load_model(self, repository_name: str, name: str, params: Params) -> None: ...

    async def unload_model(self, repository_name: str, name: str, params: Params) -> None: ...

    # -- clients' shared memory
    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None: ...

    def shm_status(self, name: str) -> list[SystemRegion]: ...

    async def shm_unregister(self, name: str) -> None: ...

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    def cuda_shm_status(self, name: str) -> list[CudaRegion]: ...

    def cuda_shm_unregister(self, name: str) -> None: ...

    # -- settings
    async def trace_setting(
        self, model: str, values: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]: ...

    def log_settings(
        self, values: Params, wording: Wording = GRPC
    ) -> dict[str, Any]: ...
