"""What the edges' inference paths need of the daemon: running requests, and whether to trace;
for the generate extension and the OpenAI API, a version's configuration and files too.

Two implementations: ``pbd.dataplane.DataPlane`` in the daemon, and
``pbd.fronts.remote_plane.RemotePlane`` in a front-end process (``pbd serve --frontends``),
which runs requests on its direct path or hands them to the daemon over its link, and knows
the configuration of the versions on its direct path. Everything else an edge serves (health,
metadata, model control, statistics, shared-memory registration, settings) needs the daemon's
state itself: a front end passes those RPCs on to the daemon whole.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pbd.types import InferRequest, InferResult

if TYPE_CHECKING:
    from pbd.modelconfig.model import ModelConfig
    from pbd.responses import StreamResult
    from pbd.tracing.request import RequestTrace


class InferencePlane(Protocol):
    def start_trace(
        self,
        request: InferRequest,
        method: str,
        start_ns: int,
        traceparent: Callable[[], str | None],
        system: str = "grpc",
    ) -> RequestTrace | None: ...

    async def infer(self, request: InferRequest) -> InferResult: ...

    def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamResult, None]: ...

    def is_decoupled(self, request: InferRequest) -> bool: ...


class ModelPlane(InferencePlane, Protocol):
    """An ``InferencePlane`` that also knows versions: what the generate extension and the
    OpenAI API read besides running requests (NOT_FOUND for a version it does not know)."""

    def model_config(self, name: str, version: str) -> ModelConfig: ...

    def model_directories(self, name: str, version: str) -> list[Path]:
        """Where a version's files lie: its version directory, then the model's."""
        ...
