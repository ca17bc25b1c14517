"""An instance's requests in its worker, by request id: streamed responses and cancellation.

Every request sent to the worker gets an id unique for the connection and a
:class:`ResponseStream` (the caller's, for ``infer_stream``; a private one otherwise). When the
``ExecuteResult`` answers a request directly, its entry goes (``answered``); a request answered
with the response sender (``Response.streamed``) stays until its final ``StreamedResponse``
frame. A caller that gives up calls the request's ``on_cancel``, which tells the worker
(``CancelRequests``) if the request is still there.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from pbd.errors import NOT_RESCHEDULABLE, Code, PbdError, Rescheduled
from pbd.instance.memory import InstanceMemory
from pbd.responses import ResponseStream, StreamResult
from pbd.types import InferResult, PreparedRequest
from pbd.worker_client.releases import PendingReleases
from pbd.worker_client.results import FINAL, json_params, stream_item
from pbd_wire import worker_pb2 as wpb


class _Entry:
    __slots__ = ("prepared", "_stream", "own", "executed", "final")

    def __init__(self, prepared: PreparedRequest, stream: ResponseStream | None) -> None:
        self.prepared = prepared
        # The caller's stream (infer_stream), or None: a private one, made only if the model
        # answers through its response sender (most ModelInfer requests never need one).
        self._stream = stream
        self.own = stream is None  # a private stream: ModelInfer, not infer_stream
        self.executed = False  # its ExecuteResult came
        self.final = False  # its final StreamedResponse came (it may precede the result)

    @property
    def stream(self) -> ResponseStream:
        if self._stream is None:
            self._stream = ResponseStream()
        return self._stream

    @property
    def has_stream(self) -> bool:
        return self._stream is not None

    def close_own(self) -> None:
        """A private stream nobody will read any more."""
        if self.own and self._stream is not None:
            self._stream.close()


class _Awaiting:
    """A batch entry whose answer comes later, through its private stream: its last response,
    or its first for a request that says so (``InferRequest.first_answer``)."""

    __slots__ = ("stream", "first")

    def __init__(self, stream: ResponseStream, first: bool) -> None:
        self.stream = stream
        self.first = first

    async def answer(self) -> InferResult | PbdError:
        return await (self.stream.first() if self.first else self.stream.last())


class SentRequests:
    def __init__(
        self,
        *,
        model_name: str,
        version: int,
        memory: InstanceMemory,
        releases: PendingReleases,
        tell: Callable[[wpb.DaemonToWorker], None],
    ) -> None:
        self.model_name = model_name
        self.version_text = str(version)
        self.memory = memory
        self.releases = releases  # blocks the worker holds for a streamed response
        self.tell = tell  # a frame for the worker (CancelRequests), dropped once it is gone
        self._ids = itertools.count(1)
        self._entries: dict[int, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, prepared: PreparedRequest) -> int:
        """A new id for ``prepared``, about to be sent in an Execute."""
        request_id = next(self._ids)
        self._entries[request_id] = _Entry(prepared, getattr(prepared, "stream", None))
        prepared.on_cancel = functools.partial(self.cancel, request_id)
        return request_id

    def forget(self, request_ids: list[int]) -> None:
        """Those requests never reached the worker."""
        for request_id in request_ids:
            self._entries.pop(request_id, None)

    # -- the ExecuteResult ------------------------------------------------------------------------

    def answered(self, request_id: int, result: InferResult | PbdError) -> InferResult | PbdError:
        """The ExecuteResult answered ``request_id``. For an ``infer_stream`` caller the result
        goes into its stream (final) and a placeholder is returned in its place."""
        entry = self._entries.pop(request_id, None)
        if entry is None or entry.own:
            if entry is not None:
                entry.close_own()
            return result
        if isinstance(result, PbdError):
            return result  # the scheduling task fails, which ends the stream with it
        entry.stream.put(StreamResult(result=result, final=True))
        return _placeholder(result)

    def streamed(self, request_id: int, on_done: Any) -> InferResult | _Awaiting:
        """The request is answered with StreamedResponse frames; ``on_done`` runs after the
        final one (or when the stream fails)."""
        entry = self._entries.get(request_id)
        if entry is None:
            on_done()
            return InferResult("", "", "", [])
        entry.executed = True
        if entry.final:
            del self._entries[request_id]
        entry.stream.on_done(on_done)
        if entry.own:
            return _Awaiting(entry.stream, entry.prepared.request.first_answer)
        prepared = entry.prepared.request
        return InferResult(prepared.model_name, prepared.model_version, prepared.id, [])

    def rescheduled(self, request_id: int, iterative: bool) -> PbdError:
        """The model handed the request back. An iterative sequence's request runs again (a
        new id, its caller's stream kept): ``Rescheduled``, which its sequence batcher takes
        back. Any other model: Triton's error, as the request's answer."""
        if not iterative:
            error = PbdError(Code.INTERNAL, NOT_RESCHEDULABLE)
            self.answered(request_id, error)
            return error
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            entry.close_own()  # responses of this round on a private stream: nobody reads them
        return Rescheduled()

    async def resolve(self, results: list[Any]) -> list[InferResult | PbdError]:
        """Wait for the answers that come through private streams (ModelInfer on a model that
        answers with its response sender)."""
        if not any(isinstance(item, _Awaiting) for item in results):
            return results  # nearly always: nothing to wait for
        out: list[InferResult | PbdError] = []
        for item in results:
            out.append(await item.answer() if isinstance(item, _Awaiting) else item)
        return out

    # -- frames -----------------------------------------------------------------------------------

    def on_frame(self, frame: wpb.StreamedResponse) -> None:
        entry = self._entries.get(frame.request_id)
        final = bool(frame.flags & FINAL)
        item = stream_item(
            frame, lambda r: self._result(entry, r, frame.held) if entry is not None else None
        )
        if frame.held and item.result is None:
            self.releases.add(frame.held)
        if entry is None:
            if item.result is not None:
                item.result.release()
            return
        if final:
            entry.final = True
            if entry.executed:
                del self._entries[frame.request_id]
        entry.stream.put(item)

    def _result(self, entry: _Entry, response: wpb.Response, held: int) -> InferResult | None:
        request = entry.prepared.request
        targets = entry.prepared.output_targets
        memory = self.memory
        try:
            outputs = [memory.output(ref, ref.name in targets) for ref in response.outputs[:]]
        except ValueError:
            return None

        def release() -> None:
            if held:
                self.releases.add(held)

        return InferResult(
            model_name=self.model_name,
            model_version=self.version_text,
            id=request.id,
            outputs=outputs,
            parameters=json_params(response.parameters_json),
            _release=release,
        )

    # -- cancellation and failure -----------------------------------------------------------------

    def cancel(self, request_id: int) -> None:
        """The caller gave up on ``request_id``: tell the worker, if it still has it."""
        entry = self._entries.get(request_id)
        if entry is None:
            return
        if entry.own:
            entry.stream.close()
        self.memory.cancel.cancel(request_id)  # seen at once, even inside execute()
        self.tell(wpb.DaemonToWorker(cancel=wpb.CancelRequests(request_ids=[request_id])))

    def fail_all(self, error: PbdError) -> None:
        """The worker is gone: every open stream ends with ``error``."""
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            if not entry.own or entry.has_stream:
                entry.stream.fail(error)


def _placeholder(result: InferResult) -> InferResult:
    return InferResult(result.model_name, result.model_version, result.id, [])


