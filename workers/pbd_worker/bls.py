"""BLS in the worker: ``InferenceRequest.exec()`` and the model-control functions.

A call goes to the daemon as a ``BlsCall`` of descriptors. Inputs that already lie in a segment
the daemon owns for this instance (the request's own inputs, passed through) are named as they
are; any other input is written once into this worker's output arena and held until the reply.
The daemon runs the call through its normal path (validation, queue, an instance of the callee)
and replies with descriptors of the callee's outputs, in the callee's segments. They are mapped
here (a map of their own, so an output the model returns as its own is copied into our arena,
never aliased to another instance's block) and handed to the model as arrays over those bytes:
writable, as Triton's are (the blocks belong to this call alone).

The callee's blocks stay allocated until the model drops every array of the call: each output
is one uint8 "owner" array that the tensors are views of, and a ``weakref.finalize``
on it notes the call as done. Done calls ride ahead of the next frame the worker sends (the
next BLS call, the batch's result, a heartbeat) as ``BlsDone``. Finalizers may run in any
thread, even inside a send, so they only append to a deque.

``async_exec`` from a coroutine on the worker's event loop (``pbd_worker.event_loop``) sends
the call and awaits its reply on that loop: concurrent calls of concurrent coroutines, no
thread. A decoupled call (``exec`` and ``async_exec`` alike) returns its response iterator once
the first response is in, as Triton's stub does: a coroutine that then iterates it
synchronously finds that response there instead of blocking the loop (and with it every other
coroutine's calls) until the callee first answers. The batch a call belongs to (the parents
the daemon's deadlock check follows, the traceparent) is a context variable, so a decoupled
model's background coroutine keeps its own batch's after the main loop moved on to the next
batch.

GPU inputs go through the daemon's CUDA memory pool instead of the arena: one ``PoolAlloc`` per
call for all of them (all granted or none), a device-to-device copy into each block, and the
call names the blocks; the daemon frees them when the call ends. A full pool fails the call
with the daemon's message (``--cuda-memory-pool-byte-size``). The callee's outputs come back in
host memory.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import itertools
import json
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from pbd_wire import worker_pb2 as wpb
from pbd_wire.cuda import CudaRegions
from pbd_wire.shm import Arena, Block, SegmentMap, ShmExhausted
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.model_api.errors import TritonError, TritonModelException
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response import InferenceResponse
from pbd_worker.model_api.tensor import Tensor

_NOT_IN_EXECUTE = "BLS is only supported during the 'execute' function."

Replies = Callable[[tuple[str, int]], Awaitable[wpb.DaemonToWorker]]


class _Batch:
    """What a call made while executing a batch carries: the BLS calls being served
    (``parents``, for the daemon's cycle check) and the trace to join. Read from the batch's
    requests when a call asks (most batches make none)."""

    __slots__ = ("_requests",)

    def __init__(self, requests: Sequence[wpb.Request] = ()) -> None:
        self._requests = requests

    @property
    def parents(self) -> list[int]:
        return [r.bls_call for r in self._requests if r.bls_call]

    @property
    def traceparent(self) -> str:
        return next((r.traceparent for r in self._requests if r.traceparent), "")


# The batch whose execute() is running in this context: set by the main loop around a batch;
# tasks created meanwhile (a decoupled model's background coroutine) inherit it.
_current_batch: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar(
    "pbd_bls_batch", default=None
)


class _Call:
    """What one call holds on this side: input blocks, and how many output owners live."""

    def __init__(self, call_id: int, decoupled: bool = False) -> None:
        self.call_id = call_id
        self.decoupled = decoupled
        self.blocks: list[Block] = []
        self.live = 0
        self.final = False
        self.noted = False


class ResponseIterator:
    """``exec(decoupled=True)``: the call's responses, in order; ends after the final one.
    Iterated again once it has ended, it gives the same responses again, as Triton's does.
    ``first``: the response already received (made once it was in)."""

    def __init__(
        self, client: BlsClient | None, call: _Call, first: InferenceResponse | None = None
    ) -> None:
        self._client = client
        self._call = call
        self._cancelled = False
        self._first = first
        self._seen: list[InferenceResponse] = []
        self._replay: collections.deque[InferenceResponse] | None = None

    @classmethod
    def answered(cls, responses: list[InferenceResponse]) -> ResponseIterator:
        """An iterator whose call is over: it gives ``responses`` (and again when iterated
        again)."""
        ended = _Call(0, decoupled=True)
        ended.final = True
        iterator = cls(None, ended)
        iterator._seen = list(responses)
        iterator._replay = collections.deque(responses)
        return iterator

    def __iter__(self) -> ResponseIterator:
        if self._call.final and self._first is None and self._replay is None:
            self._replay = collections.deque(self._seen)
        return self

    def __next__(self) -> InferenceResponse:
        if self._replay is not None:
            if not self._replay:
                self._replay = None
                raise StopIteration
            return self._replay.popleft()
        if self._first is not None and not self._cancelled:
            response, self._first = self._first, None
            self._seen.append(response)
            return response
        if self._call.final or self._cancelled or self._client is None:
            raise StopIteration
        response = self._client._next_response(self._call)
        self._seen.append(response)
        return response

    def cancel(self) -> None:
        """Cancel the call: the callee's request is cancelled (its response sender's
        ``is_cancelled()`` turns True) and responses not read yet are dropped."""
        if self._client is not None and not self._cancelled and not self._call.final:
            self._cancelled = True
            self._client.link.send(
                wpb.WorkerToDaemon(bls_cancel=wpb.BlsCancel(call_id=self._call.call_id))
            )
            while not self._call.final:
                self._client._next_response(self._call)


class BlsClient:
    def __init__(self, link: DaemonLink, shm_dir: str, replies: Replies, loop: Any) -> None:
        self.link = link
        self.replies = replies  # awaits a reply on ``loop`` (``WorkerLoop.reply``)
        self.loop = loop
        self.shm_dir = shm_dir
        self.callee_segments = SegmentMap(shm_dir)
        self.inputs: SegmentMap | None = None  # the daemon's segments for this instance
        self.arena: Arena | None = None  # ours (the executor's output arena)
        self._ids = itertools.count(1)
        self._done: collections.deque[int] = collections.deque()
        self._calls: dict[int, _Call] = {}
        self._lock = threading.Lock()  # arena allocations from concurrent async_exec threads
        self._batch = _Batch()  # for model threads, which do not inherit the context
        self._batch_token: contextvars.Token[_Batch | None] | None = None
        self.executing = False
        self.cuda = CudaRegions()  # the daemon's pools (shared with the executor)
        link.pending_frames.append(self._take_done)

    # -- hooks the runtime calls -------------------------------------------------------------

    def bind(self, inputs: SegmentMap, arena: Arena) -> None:
        """This instance's segments (after initialize, and anew after re-attaching)."""
        self.inputs, self.arena = inputs, arena
        self.callee_segments.close()
        self.callee_segments = SegmentMap(inputs.shm_dir)

    def begin_batch(self, requests: Sequence[wpb.Request]) -> None:
        self._batch = _Batch(requests)
        self._batch_token = _current_batch.set(self._batch)
        self.executing = True

    def end_batch(self) -> None:
        self.executing = False
        if self._batch_token is not None:
            _current_batch.reset(self._batch_token)
            self._batch_token = None

    def forget(self) -> None:
        """The daemon is gone: what it held for our calls is void."""
        self._calls.clear()
        self._done.clear()
        self.callee_segments.close()

    def _take_done(self) -> list[wpb.WorkerToDaemon]:
        if not self._done:  # nearly always (asked before every frame sent)
            return []
        ids: list[int] = []
        while self._done:
            ids.append(self._done.popleft())
        return [wpb.WorkerToDaemon(bls_done=wpb.BlsDone(call_ids=ids))] if ids else []

    # -- exec --------------------------------------------------------------------------------

    def exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        try:
            call = self._call(request, decoupled)
        except ShmExhausted as exc:
            return self._unsent(exc, decoupled)
        if decoupled:
            return ResponseIterator(self, call, self._next_response(call))
        response = self._next_response(call)
        while not call.final:  # a non-decoupled call has exactly one response
            self._next_response(call)
        return response

    def exec_async(self, request: InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        """``async_exec``: on the worker's loop the call is sent now and its reply awaited
        there; from another loop (one the model runs itself) ``exec`` runs in a thread."""
        if asyncio.get_running_loop() is not self.loop:
            return asyncio.get_running_loop().run_in_executor(None, self.exec, request, decoupled)
        try:
            call: _Call | Any = self._call(request, decoupled)
        except ShmExhausted as exc:
            call = self._unsent(exc, decoupled)
        return self.loop.create_task(self._exec_on_loop(call))

    def _unsent(self, exc: ShmExhausted, decoupled: bool) -> Any:
        """The answer to a call whose inputs found no shared memory: an error response (one
        from the iterator of a decoupled call), as Triton's stub answers it, not an
        exception."""
        response = InferenceResponse(error=TritonError(exc.message))
        return ResponseIterator.answered([response]) if decoupled else response

    async def _exec_on_loop(self, call: Any) -> Any:
        if not isinstance(call, _Call):
            return call  # answered already (_unsent)
        key = ("bls_reply", call.call_id)
        response = self._take(call, (await self.replies(key)).bls_reply)
        if call.decoupled:  # later responses are read as exec's: Triton's iterator blocks too
            return ResponseIterator(self, call, response)
        while not call.final:
            self._take(call, (await self.replies(key)).bls_reply)
        return response

    def _call(self, request: InferenceRequest, decoupled: bool) -> _Call:
        """Send the call (its inputs placed first) for the batch executing in this context."""
        batch = _current_batch.get()
        if batch is None:  # a thread the model started during execute(), or no execute at all
            if not self.executing:
                raise TritonModelException(_NOT_IN_EXECUTE)
            batch = self._batch
        call = _Call(next(self._ids), decoupled)
        message = wpb.BlsCall(
            call_id=call.call_id,
            model_name=request.model_name(),
            model_version=request.model_version(),
            decoupled=decoupled,
            parents=batch.parents,
        )
        try:
            self._describe(request, message.request, call, batch.traceparent)
        except BaseException:
            self._free_inputs(call)  # never sent: the blocks written so far go back now
            raise
        self._calls[call.call_id] = call
        self.link.send(wpb.WorkerToDaemon(bls_call=message))
        return call

    def _describe(
        self, request: InferenceRequest, out: wpb.Request, call: _Call, traceparent: str
    ) -> None:
        out.id = request.request_id()
        out.requested_outputs.extend(sorted(request.requested_output_names()))
        out.parameters_json = request.parameters()
        correlation = request.correlation_id()
        if isinstance(correlation, str):
            out.correlation_id_str = correlation
        else:
            out.correlation_id = correlation
        out.flags = request.flags()
        out.timeout_us = request.timeout()
        out.traceparent = _traceparent(request.trace().get_context()) or traceparent
        on_device: list[tuple[wpb.TensorRef, Tensor]] = []
        for tensor in request.inputs():
            ref = out.inputs.add(
                name=tensor.name(), datatype=tensor._datatype, shape=tensor.shape()
            )
            nbytes = tensor._wire_nbytes()
            ref.nbytes = nbytes
            if nbytes and not tensor.is_cpu():
                on_device.append((ref, tensor))
            elif nbytes:
                ref.region, ref.offset = self._place(tensor, nbytes, call)
        if on_device:
            self._place_in_pool(on_device)

    def _place_in_pool(self, inputs: list[tuple[wpb.TensorRef, Tensor]]) -> None:
        """GPU inputs into blocks of the daemon's CUDA pools, copied on the device."""
        ask = wpb.PoolAlloc(
            query=next(self._ids),
            device_ids=[tensor._device_id for _, tensor in inputs],
            nbytes=[ref.nbytes for ref, _ in inputs],
        )
        self.link.send(wpb.WorkerToDaemon(pool_alloc=ask))
        grant = self.link.wait_reply(("pool_grant", ask.query)).pool_grant
        if grant.HasField("error"):
            raise TritonModelException(grant.error.message)
        for (ref, tensor), pool, offset in zip(inputs, grant.pools, grant.offsets, strict=True):
            tensor._write_into_device(self.cuda.bytes_at(pool, offset, ref.nbytes))
            ref.cuda.CopyFrom(pool)
            ref.offset = offset
        for pool in {p.device_id: p for p in grant.pools}.values():
            self.cuda.synchronize(pool)

    def _place(self, tensor: Tensor, nbytes: int, call: _Call) -> tuple[str, int]:
        """Where the daemon finds the input's bytes: in place when they lie in one of the
        daemon's segments for us (not a client's region, which it would not resolve), else in
        a block of our arena written now."""
        array = tensor._array_or_none()
        if self.inputs is not None and array is not None and array.flags.c_contiguous:
            address = int(array.__array_interface__["data"][0])
            found = self.inputs.locate(address, nbytes, clients=False)
            if found is not None:
                return found[0].name, found[1]
        if self.arena is None:
            raise TritonModelException(_NOT_IN_EXECUTE)
        with self._lock:
            block = self.arena.allocate(nbytes)
        call.blocks.append(block)
        tensor._write_into(block.view())
        return block.segment.name, block.offset

    def _next_response(self, call: _Call) -> InferenceResponse:
        return self._take(call, self.link.wait_reply(("bls_reply", call.call_id)).bls_reply)

    def _take(self, call: _Call, reply: wpb.BlsReply) -> InferenceResponse:
        if reply.final:
            call.final = True
            self._free_inputs(call)
        response = self._response(reply.response, call)
        if call.final:
            self._maybe_done(call)
        return response

    def _free_inputs(self, call: _Call) -> None:
        if call.blocks and self.arena is not None:
            with self._lock:
                for block in call.blocks:
                    self.arena.free(block)
        call.blocks.clear()

    def _response(self, msg: wpb.Response, call: _Call) -> InferenceResponse:
        if msg.HasField("error"):
            return InferenceResponse(error=TritonError(msg.error.message, _code(msg.error.code)))
        tensors = [self._tensor(ref, call) for ref in msg.outputs]
        response = InferenceResponse(output_tensors=tensors)
        if msg.parameters_json:
            response._parameters_json = msg.parameters_json
        return response

    def _tensor(self, ref: wpb.TensorRef, call: _Call) -> Tensor:
        if not ref.nbytes:
            return Tensor._from_buffer(ref.name, ref.datatype, list(ref.shape), memoryview(b""))
        view = self.callee_segments.view(ref.region, ref.offset, ref.nbytes)
        owner = np.frombuffer(view, dtype=np.uint8)
        call.live += 1
        weakref.finalize(owner, self._owner_gone, call)
        return Tensor._from_buffer(ref.name, ref.datatype, list(ref.shape), owner.data)

    def _owner_gone(self, call: _Call) -> None:
        call.live -= 1
        self._maybe_done(call)

    def _maybe_done(self, call: _Call) -> None:
        if call.final and call.live <= 0 and not call.noted:
            call.noted = True
            self._calls.pop(call.call_id, None)
            self._done.append(call.call_id)

    # -- model control -------------------------------------------------------------------------

    def control(self, op: str, model_name: str, **fields: Any) -> wpb.BlsReply:
        if not isinstance(model_name, str) or not model_name:
            raise TritonModelException("model_name must be a non-empty str")
        call_id = next(self._ids)
        message = wpb.BlsControl(call_id=call_id, op=op, model_name=model_name, **fields)
        self.link.send(wpb.WorkerToDaemon(bls_control=message))
        reply = self.link.wait_reply(("bls_reply", call_id)).bls_reply
        if reply.response.HasField("error"):
            raise TritonModelException(reply.response.error.message)
        return reply


def _traceparent(context: str | None) -> str:
    """The W3C traceparent in ``InferenceTrace.get_context()`` (Triton's JSON carrier, or a
    bare traceparent a model built itself)."""
    if not context:
        return ""
    if context.lstrip().startswith("{"):
        try:
            value = json.loads(context).get("traceparent", "")
        except (ValueError, AttributeError):
            return ""
        return value if isinstance(value, str) else ""
    return context


def _code(name: str) -> str:
    known = {c for c in dir(TritonError) if c.isupper()}
    return name if name in known else TritonError.INTERNAL
