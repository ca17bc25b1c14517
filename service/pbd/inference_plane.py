"""What the edges' inference paths need of the daemon: running requests, and whether to trace.

Two implementations: ``pbd.dataplane.DataPlane`` in the daemon, and
``pbd.fronts.remote_plane.RemotePlane`` in a front-end process (``pbd serve --frontends``),
which hands each request to the daemon over its link. Everything else an edge serves (health,
metadata, model control, statistics, shared-memory registration, settings) needs the daemon's
state itself: a front end passes those RPCs on to the daemon whole.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Protocol

from pbd.types import InferRequest, InferResult

if TYPE_CHECKING:
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
