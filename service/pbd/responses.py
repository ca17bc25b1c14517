"""The responses of one request as they come: 0..n results, the last one marked final.

A decoupled model answers a request with any number of responses, sent whenever it likes, and
a final flag (possibly alone). ``ResponseStream`` carries them from the instance that reads the
worker's frames to whoever asked (``DataPlane.infer_stream``: ModelStreamInfer, BLS). Each
:class:`StreamResult` holding an ``InferResult`` must be released by its consumer (``with
item.result:``); results put after the consumer left are released at once.

A consumer that can handle a response where it is read (``InferRequest.on_response``: the
gRPC stream encodes and writes it) is its stream's ``listener``: ``put`` hands each item to
it at once, and the consumer's iteration only waits for the end. Queued for a task instead,
a response waits for that task's turn, and for the next one of the task that writes it; in
those turns the reader takes in (and handles) the responses behind it, so a stream's first
token left after a burst of its next ones (``bench.generate``). What the listener raises
ends the consumer's iteration with that exception.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from pbd.errors import Code, PbdError
from pbd.types import InferResult

# What holding one response for a slow client costs besides its bytes: the objects around it
# (its bytes object's header, a queue's entry, an HTTP/2 stream's [payload, end] pair, and
# with front ends what the daemon and the worker keep while it is relayed). A stream's buffer
# counts each response at its size plus this, so that many small responses are held to the
# buffer as a few large ones are (counted at its size alone, a 16 MiB buffer held some
# 350,000 responses of 95 bytes; docs/streaming.md).
HELD_RESPONSE_OVERHEAD = 256


def held_cost(data: bytes) -> int:
    """What ``data`` counts against a stream's buffer while it waits for its client."""
    return len(data) + HELD_RESPONSE_OVERHEAD


class BacklogFull(Exception):
    """A streamed request's client reads slower than its model writes, past the stream's
    limit (``flag``, the setting that sets it): the request is cancelled."""

    def __init__(self, waiting: int, limit: int, flag: str) -> None:
        super().__init__(
            f"the client reads too slowly: {waiting} bytes of responses would wait to be "
            f"sent, past the limit of {limit} ({flag}); the request was cancelled"
        )


@dataclass
class StreamResult:
    """One response: ``result`` (outputs), or ``error``, or neither (a final flag alone)."""

    result: InferResult | None = None
    error: PbdError | None = None
    final: bool = False


class ResponseStream:
    def __init__(self, listener: Callable[[StreamResult], None] | None = None) -> None:
        self._items: collections.deque[StreamResult] = collections.deque()
        self._wakeup = asyncio.Event()
        self.finished = False  # the final response was put (or the stream failed)
        self.closed = False  # the consumer left: later results are released at once
        self._on_done: list[Callable[[], None]] = []
        self.listener = listener  # takes each item as it is put (see the module's docstring)
        self._raised: Exception | None = None  # what the listener raised, for the consumer
        self.error: PbdError | None = None  # the last error response put
        # Called once, as the first response with outputs or an error is handed on (the
        # first-response histogram's observation).
        self.on_first: Callable[[], None] | None = None

    # -- producer side ------------------------------------------------------------------------

    def put(self, item: StreamResult) -> None:
        if item.error is not None:
            self.error = item.error
        if self.finished:
            _release(item)
            return
        if self.closed:
            _release(item)
        else:
            if self.on_first is not None and (item.result is not None or item.error is not None):
                first, self.on_first = self.on_first, None
                first()
            self._hand_on(item)
        if item.final:
            self._finish()

    def _hand_on(self, item: StreamResult) -> None:
        """To the listener, or the consumer's queue."""
        if self.listener is not None:
            try:
                self.listener(item)
            except Exception as exc:  # the consumer's iteration raises it, and it leaves
                _release(item)
                self.listener = None
                self._raised = exc
                self._wakeup.set()
        else:
            self._items.append(item)
            self._wakeup.set()

    def fail(self, error: PbdError) -> None:
        """End the stream with ``error`` (ignored once it is finished)."""
        if not self.finished:
            self.put(StreamResult(error=error, final=True))

    def on_done(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the final response is in (now, if it is)."""
        if self.finished:
            callback()
        else:
            self._on_done.append(callback)

    def _finish(self) -> None:
        self.finished = True
        self._wakeup.set()
        callbacks, self._on_done = self._on_done, []
        for callback in callbacks:
            callback()

    def settle(self, task: asyncio.Future[InferResult]) -> None:
        """Done-callback of the request's scheduling task: a request that failed before (or
        instead of) streaming ends the stream with its error; its placeholder result goes."""
        if task.cancelled():
            self.fail(PbdError(Code.CANCELLED, "the request was cancelled"))
            return
        error = task.exception()
        if error is None:
            task.result().release()
        elif isinstance(error, PbdError):
            self.fail(error)
        else:
            self.fail(PbdError(Code.INTERNAL, f"the request failed: {error!r}"))

    # -- consumer side ------------------------------------------------------------------------

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamResult:
        while True:
            if self._raised is not None:
                raised, self._raised = self._raised, None
                raise raised
            if self._items:
                return self._items.popleft()
            if self.finished:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()

    async def last(self) -> InferResult | PbdError:
        """For a caller that wants one response (ModelInfer on a model that answered with
        its response sender): the last response with outputs, or the error."""
        answer: InferResult | PbdError = PbdError(
            Code.INTERNAL, "the model sent no response for the request"
        )
        async for item in self:
            if item.error is not None:
                if isinstance(answer, InferResult):
                    answer.release()
                answer = item.error
            elif item.result is not None:
                if isinstance(answer, InferResult):
                    answer.release()
                answer = item.result
        return answer

    async def first(self) -> InferResult | PbdError:
        """For a caller whose answer is the first response (a non-decoupled request of a
        ModelStreamInfer stream): the first response with outputs or an error; the rest are
        read and released."""
        answer: InferResult | PbdError | None = None
        async for item in self:
            if answer is None and (item.result is not None or item.error is not None):
                answer = item.result if item.result is not None else item.error
            elif item.result is not None:
                item.result.release()
        if answer is None:
            return PbdError(Code.INTERNAL, "the model sent no response for the request")
        return answer

    def close(self) -> None:
        """The consumer is gone: release what it did not take."""
        self.closed = True
        while self._items:
            _release(self._items.popleft())


def _release(item: StreamResult) -> None:
    if item.result is not None:
        with contextlib.suppress(Exception):
            item.result.release()
