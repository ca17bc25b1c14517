"""The worker's requests still being answered: cancellation and response-sender delivery.

Request ids are the daemon's, unique for the connection. A request is *pending* from the
moment the reader thread reads its Execute until the main thread builds it, then *live* until
its last response left (execute returned its response, or the sender sent the final flag).
``CancelRequests`` marks live requests cancelled at once, pending ones when they are built;
ids of finished requests are ignored.

A response sent with the response sender travels as a ``StreamedResponse`` frame. Its output
blocks are held under an id with the top bit set (so one ``Release`` message frees batches
and streamed responses alike) until the daemon wrote them to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pbd_wire import worker_pb2 as wpb
from pbd_worker.loader import describe_exception
from pbd_worker.model_api.errors import TritonModelException
from pbd_worker.model_api.helpers import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from pbd_worker.model_api.response_sender import InferenceResponseSender

if TYPE_CHECKING:
    from pbd_worker.executor import BatchExecutor
    from pbd_worker.model_api.request import InferenceRequest
    from pbd_worker.model_api.response import InferenceResponse

STREAM_HELD_BIT = 1 << 63
log = logging.getLogger("pbd_worker")


class LiveRequests:
    def __init__(self, send: Callable[..., None], decoupled: bool) -> None:
        self.send = send
        self.decoupled = decoupled
        self.executor: BatchExecutor | None = None
        self._lock = threading.Lock()
        self._pending: set[int] = set()
        self._cancelled_early: set[int] = set()
        self._live: dict[int, tuple[InferenceRequest, wpb.Request]] = {}
        self._held_ids = itertools.count(1)

    # -- bookkeeping (reader thread, main thread) -----------------------------------------------

    def arrived(self, execute: wpb.Execute) -> None:
        """The reader thread read ``execute``: its requests may be cancelled from now on."""
        with self._lock:
            self._pending.update(r.request_id for r in execute.requests)

    def cancel(self, request_ids: list[int]) -> None:
        with self._lock:
            for request_id in request_ids:
                live = self._live.get(request_id)
                if live is not None:
                    live[0]._set_cancelled()
                elif request_id in self._pending:
                    self._cancelled_early.add(request_id)

    def start(self, msg: wpb.Request, request: InferenceRequest) -> None:
        request._uid = msg.request_id  # type: ignore[attr-defined]
        with self._lock:
            self._pending.discard(msg.request_id)
            self._live[msg.request_id] = (request, msg)
            if msg.request_id in self._cancelled_early:
                self._cancelled_early.discard(msg.request_id)
                request._set_cancelled()

    def done(self, request_id: int) -> None:
        with self._lock:
            self._live.pop(request_id, None)
            self._pending.discard(request_id)

    def forget_all(self) -> None:
        """The daemon is gone: nothing is pending or live any more."""
        with self._lock:
            self._pending.clear()
            self._cancelled_early.clear()
            self._live.clear()

    # -- the response sender ----------------------------------------------------------------------

    def sender_for(self, request: InferenceRequest) -> InferenceResponseSender:
        """``state.response_sender_factory``."""
        return InferenceResponseSender(request, self.decoupled, self._deliver)

    def _deliver(
        self, request: InferenceRequest, response: InferenceResponse | None, flags: int
    ) -> None:
        request_id = getattr(request, "_uid", None)
        if request_id is None:  # a request the model built (BLS), not one it received
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        with self._lock:
            live = self._live.get(request_id) if request_id is not None else None
        if live is None or self.executor is None:
            return  # answered already, or its daemon is gone: nobody to send to
        out = wpb.StreamedResponse(request_id=request_id, flags=flags)
        if response is not None:
            held: list = []
            out.response.CopyFrom(self.executor.build_response(live[1], request, response, held))
            if held:
                out.held = STREAM_HELD_BIT | next(self._held_ids)
                self.executor.hold(out.held, held)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.done(request_id)
        self.send(wpb.WorkerToDaemon(streamed=out))


class BackgroundLoop:
    """Where a decoupled model's ``async def execute`` runs: an event loop on its own thread,
    so execute "returns" at once and batches of one instance run concurrently (Triton 24.04+).
    An exception is only logged: the model answers through its response senders."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="async-execute", daemon=True).start()

    def run(self, awaitable: Any) -> None:
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self.loop)
        future.add_done_callback(_log_failure)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        text, tb = describe_exception(future.exception())
        log.error("async execute() failed in the background: %s\n%s", text, tb)
