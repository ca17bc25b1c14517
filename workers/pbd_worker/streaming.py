"""The worker's requests still being answered: cancellation and response-sender delivery.

Request ids are the daemon's, unique for the connection. A request is *live* from the moment
its batch starts until its last response left (execute returned its response, or the sender
sent the final flag). The daemon cancels a request on its cancellation page
(``ipc.cancel_flags``), which ``is_cancelled()`` reads at once, and with a ``CancelRequests``
frame, which the main loop reads between batches; ids of finished requests are ignored.

A response sent with the response sender travels as a ``StreamedResponse`` frame. Its output
blocks are held under an id with the top bit set (so one ``Release`` message frees batches
and streamed responses alike) until the daemon wrote them to the client.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.shm import Block
from pbd_worker.loader import describe_exception
from pbd_worker.model_api.errors import TritonModelException
from pbd_worker.model_api.helpers import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from pbd_worker.model_api.response_sender import InferenceResponseSender

if TYPE_CHECKING:
    from pbd_worker.model_api.request import InferenceRequest
    from pbd_worker.model_api.response import InferenceResponse


class ResponseWriter(Protocol):
    """What sending a response uses of the executor (``pbd_worker.executor.BatchExecutor``,
    which imports this module)."""

    def build_response(
        self, msg: wpb.Request, request: InferenceRequest, response: InferenceResponse,
        held: list[Block],
    ) -> wpb.Response: ...  # fmt: skip
    def hold(self, held_id: int, blocks: list[Block]) -> None: ...

STREAM_HELD_BIT = 1 << 63
log = logging.getLogger("pbd_worker")


class LiveRequests:
    def __init__(self, send: Callable[..., None], decoupled: bool) -> None:
        self.send = send
        self.decoupled = decoupled
        self.executor: ResponseWriter | None = None
        self._lock = threading.Lock()
        self.flags: CancelFlags | None = None  # the daemon's cancellation page
        self._live: dict[int, tuple[InferenceRequest, wpb.Request]] = {}
        self._held_ids = itertools.count(1)

    # -- bookkeeping (main thread, model threads) ------------------------------------------------

    def cancel(self, request_ids: list[int]) -> None:
        with self._lock:
            for request_id in request_ids:
                live = self._live.get(request_id)
                if live is not None:
                    live[0]._set_cancelled()

    def start(self, msg: wpb.Request, request: InferenceRequest) -> None:
        request_id = msg.request_id
        request._uid = request_id  # type: ignore[attr-defined]
        if self.flags is not None:
            request._cancel_flag = functools.partial(self.flags.cancelled, request_id)
        with self._lock:
            self._live[request_id] = (request, msg)

    def done(self, request_id: int) -> None:
        with self._lock:
            self._live.pop(request_id, None)

    def forget_all(self) -> None:
        """The daemon is gone: nothing is live any more, its cancellation page is void."""
        with self._lock:
            self._live.clear()
        if self.flags is not None:
            self.flags.close()
            self.flags = None

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
            held: list[Block] = []
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
