"""One ModelStreamInfer call: requests in, responses out, as Triton does it.

- Responses of non-decoupled models (and requests that fail before reaching a model) go out
  in request order; a decoupled model's responses go out as they are produced.
- A failed request is answered in band (``error_message``); the stream stays open. With
  Triton's ``triton_grpc_error: true`` header (``grpc_error``), an error from a model (its
  ``execute``, its instance, its queue) ends the call instead, with that error's status (the
  run raises it); requests refused before a model (unknown model, invalid input) are still
  answered in band, as Triton 2.51 does.
- Every response carries ``triton_final_response``. A decoupled model's final flag sent
  without a response is dropped, unless the request asked for it with
  ``triton_enable_empty_final_response``: then it goes out as an empty response.
- After the client half-closes, the call ends (OK) once every request is answered. A client
  that cancels or drops the call cancels what is still queued or running (the worker sees
  ``is_cancelled()``).
- A client that reads slower than the model writes holds back its own call, not the
  server's memory: past ``buffer_bytes`` of responses waiting (here, and in the HTTP/2
  stream for the client's window: ``pbd.grpc.calls``), the call reads none of the client's
  next requests until it catches up, so HTTP/2 flow control stops the client's sending. A
  decoupled request streams on regardless: one of its responses that finds the buffer full
  here as well cancels it and ends it with an error, as a slow SSE client's does.
- Each request is traced as a ModelInfer is, when the trace settings pick it: a decoupled
  request's server span has a ``response`` span per response sent and ends with its final one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from pbd.errors import Code, PbdError
from pbd.grpc import convert
from pbd.grpc.status import finishing
from pbd.inference_plane import InferencePlane
from pbd.responses import BacklogFull, StreamResult, held_cost
from pbd.tracing.request import RequestTrace
from pbd.types import InferRequest

log = logging.getLogger("pbd.grpc")

EMPTY_FINAL_KEY = "triton_enable_empty_final_response"
# Answers one non-decoupled request (traced when picked), as bytes to write.
OrderedAnswer = Callable[[bytes], Awaitable[bytes]]
# The trace of a decoupled request (started at the given ns) when the settings pick it.
StartTrace = Callable[[InferRequest, int], RequestTrace | None]


class StreamSession:
    def __init__(
        self,
        dataplane: InferencePlane,
        answer_ordered: OrderedAnswer,
        start_trace: StartTrace = lambda request, began: None,
        grpc_error: bool = False,
        buffer_bytes: int = 0,
        send_now: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.dp = dataplane
        # Writes a response at once (the call's ``Context.send_now``) while none waits in
        # ``_out``: False when the client is too far behind, and then it waits there.
        self.send_now = send_now
        self.answer_ordered = answer_ordered  # raises the PbdError that ends a grpc_error call
        self.start_trace = start_trace
        self.grpc_error = grpc_error
        # What to write, in order; a PbdError ends the call with its status (grpc_error).
        self._out: asyncio.Queue[bytes | PbdError | None] = asyncio.Queue()
        self.buffer_bytes = buffer_bytes  # 0: no limit
        self._out_bytes = 0  # of the responses in _out
        self._room = asyncio.Event()  # set when _out_bytes falls to buffer_bytes or below
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_ordered: asyncio.Future[None] | None = None

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        reader = asyncio.create_task(self._read(requests))
        try:
            while (data := await self._out.get()) is not None:
                if isinstance(data, PbdError):
                    raise data
                self._out_bytes -= held_cost(data)
                if self._out_bytes <= self.buffer_bytes:
                    self._room.set()
                yield data
            await reader
        finally:
            reader.cancel()
            for task in list(self._tasks):
                task.cancel()
            # Let the cancelled requests run their cleanup (worker cancellation, releases).
            pending = [reader, *self._tasks]
            with contextlib.suppress(BaseException):
                await asyncio.gather(*pending, return_exceptions=True)
            while not self._out.empty():
                self._out.get_nowait()

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for raw in requests:
                self._spawn(raw)
                while self.buffer_bytes and self._out_bytes > self.buffer_bytes:
                    self._room.clear()
                    await self._room.wait()
            while self._tasks:  # half-closed: finish once everything is answered
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            # Whatever ends the reader ends the call: run() must never wait for nothing.
            self._out.put_nowait(None)  # the end

    def _spawn(self, raw: bytes) -> None:
        request: InferRequest | None
        try:
            request = convert.infer_request_from_wire(raw)
        except (PbdError, ValueError, TypeError):
            request = None  # answered in band, in order, with the parse error
        if request is not None and self.dp.is_decoupled(request):
            task = asyncio.create_task(self._decoupled(request, time.time_ns()))
        else:
            previous = self._last_ordered
            mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._last_ordered = mine
            task = asyncio.create_task(self._ordered(raw, previous, mine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ordered(
        self, raw: bytes, previous: asyncio.Future[None] | None, mine: asyncio.Future[None]
    ) -> None:
        try:
            data: bytes | PbdError
            try:
                data = await self.answer_ordered(raw)
            except PbdError as exc:  # grpc_error: the model's error ends the call
                data = exc
            if previous is not None:
                await previous
            self._put(data)
        finally:
            if not mine.done():
                mine.set_result(None)

    def _put(self, data: bytes | PbdError) -> None:
        if isinstance(data, PbdError):
            self._out.put_nowait(data)
            return
        if self._out.empty() and self.send_now is not None and self.send_now(data):
            return
        self._out_bytes += held_cost(data)
        self._out.put_nowait(data)

    async def _decoupled(self, request: InferRequest, began: int) -> None:
        try:
            trace = self.start_trace(request, began)
            if trace is None:
                await self._responses(request, None)
            else:
                request.trace = trace
                with finishing(trace):
                    await self._responses(request, trace)
        except PbdError as exc:
            ends = self.grpc_error and not exc.before_model
            self._put(exc if ends else convert.stream_error_to_wire(request, exc.message))
        except (ValueError, TypeError) as exc:
            message = f"malformed request: {exc}"
            self._put(convert.stream_error_to_wire(request, message))

    async def _responses(self, request: InferRequest, trace: RequestTrace | None) -> None:
        empty_final = request.parameters.get(EMPTY_FINAL_KEY) is True

        def respond(item: StreamResult) -> None:
            if item.error is not None and self.grpc_error:
                raise item.error  # ends the call (in _decoupled)
            replying = time.time_ns()
            data = self._encode(request, item, empty_final)
            if data is None:
                return
            if not item.final:
                self._check_backlog(request, held_cost(data))
            self._put(data)
            if trace is not None:
                trace.responded(replying)

        # Each response is encoded and written where the plane reads it (pbd.responses); what
        # the plane still yields is handled here. Leaving early (the client too far behind,
        # the call over, a raise in ``respond``) cancels the request.
        request.on_response = respond
        async with contextlib.aclosing(self.dp.infer_stream(request)) as items:
            async for item in items:
                respond(item)

    def _check_backlog(self, request: InferRequest, nbytes: int) -> None:
        """A decoupled request may stream without end, so pausing the reading of requests
        does not bound it: a response that finds the client behind by more than the buffer
        (in the HTTP/2 stream) and the buffer again (here) cancels its request, which ends
        with an error (in band; with ``triton_grpc_error``, the call ends)."""
        waiting = self._out_bytes
        if self.buffer_bytes and waiting and waiting + nbytes > self.buffer_bytes:
            full = BacklogFull(waiting + nbytes, self.buffer_bytes, "--grpc-stream-buffer-bytes")
            log.warning("ModelStreamInfer of model '%s': %s", request.model_name, full)
            raise PbdError(Code.RESOURCE_EXHAUSTED, str(full))

    @staticmethod
    def _encode(request: InferRequest, item: StreamResult, empty_final: bool) -> bytes | None:
        if item.error is not None:
            return convert.stream_error_to_wire(request, item.error.message, item.final)
        if item.result is not None:
            with item.result as result:
                return convert.stream_response_to_wire(result, item.final)
        if item.final and empty_final:
            return convert.stream_empty_final_to_wire(request)
        return None
