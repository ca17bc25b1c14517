"""The worker's requests still being answered: cancellation and response-sender delivery.

Request ids are the daemon's, unique for the connection, or a front end's (the direct path:
an id names its front link, ``pbd_wire.front_of``; ``send`` takes a response where its
request came from, ``ipc.front_connections``). A request is *live* from the moment its batch starts
until its last response left (execute returned its response, or the sender sent the final
flag). The daemon cancels a request on its cancellation page
(``ipc.cancel_flags``), which ``is_cancelled()`` reads at once, and with a ``CancelRequests``
frame, which the main loop reads between batches; ids of finished requests are ignored.

A response sent with the response sender travels as a ``StreamedResponse`` frame. Its output
blocks are held under an id with the top bit set (so one ``Release`` message frees batches
and streamed responses alike) until the daemon wrote them to the client.

A decoupled model's ``send``, for a request a front end sent (the direct path), returns once
no more than ``RESPONSES_AHEAD`` of the request's responses with outputs wait for the front
end to release them (it does once it encoded them for its client), as Triton's stub waits
for its server to take each response (a window of one). Requests the daemon sent are not
paced: among them are BLS calls, whose caller (a model) may keep every response, and their
blocks, until the stream ended: waiting for those releases would never end. Nor are sends
from the main thread (``execute`` itself, an ``async def execute`` on the worker's loop):
that thread reads the releases. Unpaced, a
model that makes its tokens at once sent them all while its reader was still writing the
first: on a loaded machine the burst took the CPU the first token needed, and the client
saw it after most of the others (``bench.generate``: first token 3.9–4.4 ms at 1 stream and
13–15 ms at 8; paced by 4: 1.6 ms and 6.5 ms, Triton 1.75 and 5.2; docs/streaming.md).

In the default mode a request has exactly one response, so the one its sender sends is its
last: it leaves with the final flag whether or not the model added it (Triton would wait for the
flag, and a model that never sends it would hang the client). Sent while ``execute`` still runs
without the flag, it is kept until ``execute`` returned (``finish_execute``): if ``execute``
answers the request too (raises, or returns a response for it), the response goes, followed by
Triton's "expected a single response, got 2" as the last (``send_then_fail``): ModelInfer
answers the error, a ModelStreamInfer stream the first response, as Triton's front ends do.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pbd_wire import RESPONSES_AHEAD, front_of
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.shm import Block
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
    def hold(self, held_id: int, blocks: list[Block], request_id: int = 0) -> None: ...
    def release(self, batch_ids: list[int]) -> None: ...
    def wait_released(self, request_id: int, most: int, live: Callable[[], bool]) -> None: ...


STREAM_HELD_BIT = 1 << 63


def _may_wait() -> bool:
    """A sender on the main thread never waits for releases: that thread reads them (and
    runs ``execute`` and the worker's event loop, where an ``async def execute`` sends)."""
    return threading.current_thread() is not threading.main_thread()


class LiveRequests:
    def __init__(self, send: Callable[..., None], decoupled: bool) -> None:
        self.send = send
        self.decoupled = decoupled
        self.executor: ResponseWriter | None = None
        self._lock = threading.Lock()
        self.flags: CancelFlags | None = None  # the daemon's cancellation page
        self._live: dict[int, tuple[InferenceRequest, wpb.Request]] = {}
        self._held_ids = itertools.count(1)
        # Default mode: requests whose execute() runs, and the responses sent meanwhile
        # without the final flag (kept until execute() returned).
        self._executing: set[int] = set()
        self._unfinished: dict[int, wpb.StreamedResponse] = {}

    # -- bookkeeping (main thread, model threads) ------------------------------------------------

    def cancel(self, request_ids: list[int]) -> None:
        with self._lock:
            for request_id in request_ids:
                live = self._live.get(request_id)
                if live is not None:
                    live[0]._set_cancelled()

    def live_ids(self) -> list[int]:
        """The ids of the requests live now."""
        with self._lock:
            return list(self._live)

    def start_batch(
        self, ids: list[int], msgs: list[wpb.Request], requests: list[InferenceRequest]
    ) -> None:
        """Record a batch's requests as live (``ids``: their ``request_id``s), under one
        lock."""
        flags = self.flags
        executing = not self.decoupled
        with self._lock:
            for request_id, msg, request in zip(ids, msgs, requests, strict=True):
                request._uid = request_id  # type: ignore[attr-defined]
                if flags is not None:
                    request._cancel_flag = functools.partial(flags.cancelled, request_id)
                self._live[request_id] = (request, msg)
                if executing:
                    self._executing.add(request_id)

    def done(self, request_id: int) -> None:
        with self._lock:
            self._live.pop(request_id, None)
            self._executing.discard(request_id)

    def finish_execute(
        self, request_ids: list[int], answered: list[int] | None = None
    ) -> dict[int, wpb.StreamedResponse]:
        """execute() returned for these requests: responses their senders sent from now on
        leave at once; those kept meanwhile are returned (the executor decides their fate).
        ``answered``: requests execute() returned a response for, ``done`` at the same time."""
        with self._lock:
            if answered:
                for request_id in answered:
                    self._live.pop(request_id, None)
                    self._executing.discard(request_id)
            if self.decoupled:
                return {}
            self._executing.difference_update(request_ids)
            if not self._unfinished:
                return {}
            return {i: out for i in request_ids if (out := self._unfinished.pop(i, None))}

    def send_final(self, out: wpb.StreamedResponse) -> None:
        """Send a response ``finish_execute`` returned: the request's one and last."""
        out.flags = TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self.done(out.request_id)
        self.send(wpb.WorkerToDaemon(streamed=out))

    def send_then_fail(self, out: wpb.StreamedResponse, error: wpb.Error) -> None:
        """A response ``finish_execute`` returned, then ``error`` as the request's last: the
        request got two answers (execute answered it too). Both go, so each edge answers as
        Triton's does: ModelInfer with "expected a single response, got 2", a stream with
        the first."""
        out.flags = 0
        last = wpb.StreamedResponse(
            request_id=out.request_id,
            flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            response=wpb.Response(request_id=out.request_id, error=error),
        )
        self.done(out.request_id)
        self.send(wpb.WorkerToDaemon(streamed=out), wpb.WorkerToDaemon(streamed=last))

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
                paced = self.decoupled and front_of(request_id) >= 0
                self.executor.hold(out.held, held, request_id if paced else 0)
        if not self.decoupled:
            with self._lock:
                if not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                    if request_id in self._executing:
                        self._unfinished[request_id] = out
                        return
                elif request_id in self._unfinished:  # the flag for the one kept
                    out = self._unfinished.pop(request_id)
            out.flags = TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if out.flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.done(request_id)
        self.send(wpb.WorkerToDaemon(streamed=out))
        if out.held and self.decoupled and front_of(request_id) >= 0 and _may_wait():
            self.executor.wait_released(
                request_id,
                RESPONSES_AHEAD,
                lambda: request_id in self._live and not request.is_cancelled(),
            )
