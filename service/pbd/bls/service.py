"""BLS in the daemon: run the calls models make (``InferenceRequest.exec``) and their
``load_model`` / ``unload_model`` / ``is_model_ready``.

A ``BlsCall`` names its inputs in the caller's segments; they become an ``InferRequest`` whose
input data are views of those bytes, and the call runs through ``DataPlane.infer`` like any
client request (validation, the model's queue, one of its instances; the inputs are copied
once, into the callee's arena, as a client's bytes are). The reply names the callee's outputs
where they lie (the callee worker's segments, or the callee's arena for an output that is its
input): the caller maps them. The ``InferResult`` stays held, so those blocks stay allocated,
until the caller sends ``BlsDone`` for the call (or goes away).

A call to a decoupled model (``exec(decoupled=True)``) runs through ``DataPlane.infer_stream``:
a reply per response as the callee sends it, the last one final; every response's result is
held until the ``BlsDone`` of the call. ``BlsCancel`` (the model cancelled the iterator) cancels
the callee's request.

GPU inputs of a call travel through the daemon's CUDA memory pool (``pbd.bls.pool``): the caller
copies them into blocks it was granted, the callee's worker reads them on the device.

Timeouts (``timeout`` µs on the request) are enforced here: past it the call is answered with
Triton's queue-timeout error and the callee's result, if it comes later, is dropped. Deadlocks
(a call no instance can ever take, because every instance of the callee waits on it, directly
or through other calls) are found by ``pbd.bls.wait_graph`` when a call is made, and answered
with an error instead of queueing forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from pbd.bls.pool import BlsPool
from pbd.bls.wait_graph import Waiter, WaitGraph
from pbd.errors import Code, PbdError
from pbd.instance.memory import locate
from pbd.memory import lent
from pbd.memory.cuda_pool import CudaPools
from pbd.types import InferRequest, InferResult, InputTensor, RequestedOutput
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import ShmExhausted

if TYPE_CHECKING:
    from pbd.dataplane import DataPlane
    from pbd.instance.instance import Instance

log = logging.getLogger("pbd.bls")
TIMEOUT_MESSAGE = "Request timeout expired"
# Triton's refusal of a non-decoupled BLS call to a decoupled model.
_NOT_DECOUPLED_CALL = (
    "Model {model} is using the decoupled. The current BLS request call doesn't support "
    "models using the decoupled transaction policy. Please use 'decoupled=True' argument to "
    "the 'exec' or 'async_exec' calls for decoupled models.'"
)
# Triton's refusal of a call to a model (or version) that is not loaded and ready.
_NOT_READY = "Failed for execute the inference request. Model '{model}' is not ready."


class BlsService:
    def __init__(self, dataplane: DataPlane, pools: CudaPools | None = None) -> None:
        self.dp = dataplane
        self.pool = BlsPool(pools or CudaPools({}))
        self.graph = WaitGraph(self._instances_of)
        # (caller, call id) -> the callee's result, held until the caller is done with it
        self._held: dict[tuple[Instance, int], list[InferResult]] = {}
        # (caller, call id) of decoupled calls in progress -> set when the caller cancels
        self._cancels: dict[tuple[Instance, int], asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._watched: set[Instance] = set()

    # -- from an instance's reader ------------------------------------------------------------

    def on_message(self, caller: Instance, message: wpb.WorkerToDaemon) -> None:
        kind = message.WhichOneof("kind")
        if kind == "bls_done":
            for call_id in message.bls_done.call_ids:
                self._release(caller, call_id)
            return
        if kind == "bls_cancel":
            cancel = self._cancels.get((caller, message.bls_cancel.call_id))
            if cancel is not None:
                cancel.set()
            return
        if caller not in self._watched:
            self._watched.add(caller)
            self._spawn(self._forget_when_gone(caller))
        if kind == "bls_call":
            self._spawn(self._call(caller, message.bls_call))
        elif kind == "pool_alloc":
            self._spawn(self.pool.grant(caller, message.pool_alloc))
        elif kind == "bls_control":
            self._spawn(self._control(caller, message.bls_control))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _release(self, caller: Instance, call_id: int) -> None:
        for result in self._held.pop((caller, call_id), ()):
            result.release()

    async def _forget_when_gone(self, caller: Instance) -> None:
        """A caller that died (or stopped) will send no BlsDone: release what it held."""
        while caller.state.value in ("STARTING", "READY"):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(caller.died.wait(), 1.0)
        self._watched.discard(caller)
        self.graph.forget_instance(caller)
        self.pool.forget(caller)
        for key in [k for k in self._held if k[0] is caller]:
            self._release(*key)

    def _reply(self, caller: Instance, reply: wpb.BlsReply) -> None:
        if caller.conn is not None:
            with contextlib.suppress(PbdError, ConnectionError):
                caller.conn.send(wpb.DaemonToWorker(bls_reply=reply))

    # -- calls ----------------------------------------------------------------------------------

    async def _call(self, caller: Instance, call: wpb.BlsCall) -> None:
        response = wpb.Response()
        began = time.time_ns()
        trace = None
        waiter = self.graph.add_call(caller, call.model_name, list(call.parents))
        caller.calling += 1
        try:
            request = self._request(caller, call)
            request.bls_call = waiter.gid
            try:
                runtime = self.dp.repository.lookup(request.model_name, request.model_version)
            except PbdError:  # Triton asks whether the model is ready, whatever the reason
                raise _refused(call.model_name, _NOT_READY) from None
            if runtime.config.decoupled:
                if not call.decoupled:
                    raise _refused(call.model_name, _NOT_DECOUPLED_CALL)
                self.graph.check()
                trace = request.trace = self._trace(call, request, began)
                await self._stream(caller, call, request, waiter)
                if trace is not None:
                    trace.finish()
                return
            trace = request.trace = self._trace(call, request, began)
            self.graph.check()
            infer = asyncio.ensure_future(self.dp.infer(request))
            result = await self._await(infer, waiter, call.request.timeout_us)
            if caller not in self._watched:  # the caller went away meanwhile
                result.release()
                raise PbdError(Code.UNAVAILABLE, f"{caller.describe()} is gone")
            self._held[(caller, call.call_id)] = [result]
            self._describe(caller, call.call_id, result, response)
            if trace is not None:
                trace.finish()
        except PbdError as exc:
            del response.outputs[:]
            self._release(caller, call.call_id)  # an error names no output: nothing to hold
            response.error.CopyFrom(wpb.Error(code=exc.code.value, message=exc.message))
            if trace is not None:
                trace.finish(2, exc.message)
        except Exception as exc:  # noqa: BLE001 - a bad call must not hurt the daemon
            log.exception("BLS call from %s failed", caller.describe())
            response.error.CopyFrom(wpb.Error(code="INTERNAL", message=f"BLS call failed: {exc}"))
        finally:
            caller.calling -= 1
            self.graph.remove_call(waiter)
            # The callee's request is over (answered, or cancelled and awaited): its GPU
            # inputs' pool blocks go back.
            self.pool.call_ended(caller, call)
        self._reply(caller, wpb.BlsReply(call_id=call.call_id, response=response, final=True))

    def _trace(self, call: wpb.BlsCall, request: InferRequest, began: int) -> Any:
        """The call's trace, when the trace settings pick it: the caller's context is its
        parent."""
        traceparent = call.request.traceparent or None
        return self.dp.start_trace(request, "BLS", began, lambda: traceparent, "bls")

    async def _stream(
        self, caller: Instance, call: wpb.BlsCall, request: InferRequest, waiter: Waiter
    ) -> None:
        """A decoupled callee: a reply per response as it comes, the last one final. The
        call ends early, with a final reply, on a deadlock refusal, a timeout, or the
        caller's ``BlsCancel`` (the callee's request is cancelled)."""
        key = (caller, call.call_id)
        cancelled = self._cancels[key] = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call.request.timeout_us / 1e6 if call.request.timeout_us else None
        stream = self.dp.infer_stream(request)  # an async generator, which aclose() cancels
        stops: set[asyncio.Future[Any]] = {waiter.refused, asyncio.ensure_future(cancelled.wait())}
        try:
            while True:
                response = wpb.Response()
                item_future = asyncio.ensure_future(stream.__anext__())
                timeout = None if deadline is None else max(deadline - loop.time(), 0.0)
                done, _ = await asyncio.wait({item_future, *stops}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if item_future not in done:
                    item_future.cancel()
                    with contextlib.suppress(BaseException):
                        await item_future
                    if waiter.refused in done:
                        error: PbdError | None = waiter.refused.result()
                    else:
                        error = (
                            None
                            if cancelled.is_set()
                            else PbdError(Code.UNAVAILABLE, TIMEOUT_MESSAGE)
                        )
                    if error is not None:
                        response.error.CopyFrom(wpb.Error(code=error.code.value,
                                                          message=error.message))  # fmt: skip
                    self._reply(caller, wpb.BlsReply(call_id=call.call_id, response=response,
                                                     final=True))  # fmt: skip
                    return
                replying = time.time_ns()
                try:
                    item = item_future.result()
                except StopAsyncIteration:
                    self._reply(caller, wpb.BlsReply(call_id=call.call_id, final=True))
                    return
                except PbdError as exc:
                    response.error.CopyFrom(wpb.Error(code=exc.code.value, message=exc.message))
                    self._reply(caller, wpb.BlsReply(call_id=call.call_id, response=response,
                                                     final=True))  # fmt: skip
                    return
                if item.result is not None:
                    if caller not in self._watched:  # the caller went away meanwhile
                        item.result.release()
                        return
                    self._held.setdefault(key, []).append(item.result)
                    self._describe(caller, call.call_id, item.result, response)
                elif item.error is not None:
                    response.error.CopyFrom(
                        wpb.Error(code=item.error.code.value, message=item.error.message)
                    )
                self._reply(caller, wpb.BlsReply(call_id=call.call_id, response=response,
                                                 final=item.final))  # fmt: skip
                if request.trace is not None:
                    request.trace.responded(replying)
                if item.final:
                    return
        finally:
            for stop in stops:
                if stop is not waiter.refused:
                    stop.cancel()
            self._cancels.pop(key, None)
            await stream.aclose()  # cancels the callee's request if it is still running

    async def _await(
        self, infer: asyncio.Future[InferResult], waiter: Waiter, timeout_us: int
    ) -> InferResult:
        """The result, or the error of a timeout or of a deadlock found while waiting."""
        timeout = timeout_us / 1e6 if timeout_us else None
        either: set[asyncio.Future[Any]] = {infer, waiter.refused}
        done, _ = await asyncio.wait(either, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if infer in done:
            return infer.result()
        infer.cancel()
        with contextlib.suppress(BaseException):
            result = await infer  # a result that raced the cancel is released
            result.release()
        if waiter.refused in done:
            raise waiter.refused.result()
        raise PbdError(Code.UNAVAILABLE, TIMEOUT_MESSAGE)

    def _request(self, caller: Instance, call: wpb.BlsCall) -> InferRequest:
        msg = call.request
        params: dict[str, Any] = json.loads(msg.parameters_json) if msg.parameters_json else {}
        which = msg.WhichOneof("correlation")
        correlation: int | str = (
            msg.correlation_id_str if which == "correlation_id_str" else msg.correlation_id
        )
        if correlation:
            params["sequence_id"] = correlation
        if msg.flags & 1:
            params["sequence_start"] = True
        if msg.flags & 2:
            params["sequence_end"] = True
        if msg.timeout_us:
            params["timeout"] = msg.timeout_us
        return InferRequest(
            model_name=call.model_name,
            model_version="" if call.model_version < 0 else str(call.model_version),
            id=msg.id,
            inputs=[
                InputTensor(ref.name, ref.datatype, tuple(ref.shape), _caller_view(caller, ref))
                if not ref.HasField("cuda")
                else InputTensor(
                    ref.name,
                    ref.datatype,
                    tuple(ref.shape),
                    None,
                    device=self.pool.input_slice(caller, ref),
                )  # fmt: skip
                for ref in msg.inputs
            ],
            outputs=[RequestedOutput(name) for name in msg.requested_outputs],
            parameters=params,
        )

    def _describe(
        self, caller: Instance, call_id: int, result: InferResult, response: wpb.Response
    ) -> None:
        if result.parameters:
            response.parameters_json = json.dumps(result.parameters)
        for out in result.outputs:
            ref = response.outputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
            ref.nbytes = len(out.data)
            if ref.nbytes:
                ref.region, ref.offset = self._locate(caller, call_id, out.data)

    def _locate(self, caller: Instance, call_id: int, data: memoryview) -> tuple[str, int]:
        """The segment (of any instance: the callee's outputs, or its arena) holding ``data``.
        An output in no segment (an answer from the response cache) is copied into the
        caller's arena, and that block is held with the call's results."""
        found = locate(data)
        if found is not None:
            return found
        memory = caller.memory
        try:
            block = memory.arena.allocate(len(data))
        except ShmExhausted as exc:
            raise PbdError(Code.RESOURCE_EXHAUSTED, exc.message) from None
        block.view()[:] = data
        copy = InferResult("", "", "", [], _release=functools.partial(memory.free, [block]))
        self._held.setdefault((caller, call_id), []).append(copy)
        return block.segment.name, block.offset

    def _instances_of(self, model: str) -> list[Instance]:
        entry = self.dp.repository.entries.get(model)
        if entry is None:
            return []
        return [
            i
            for runtime in entry.versions.values()
            if runtime.serving
            for i in runtime.instances()
            if i.state.value == "READY" and not i.draining and not i.warming
        ]

    # -- model control ----------------------------------------------------------------------------

    async def _control(self, caller: Instance, msg: wpb.BlsControl) -> None:
        reply = wpb.BlsReply(call_id=msg.call_id, final=True)
        try:
            if msg.op == "ready":
                reply.ready = self.dp.model_ready(msg.model_name, msg.version)
            elif msg.op == "load":
                params: dict[str, tuple[str | None, Any]] = {}
                if msg.config:
                    params["config"] = ("string_param", msg.config)
                for key, value in msg.files.items():
                    params[key] = ("bytes_param", value)
                await self.dp.load_model("", msg.model_name, params)
            elif msg.op == "unload":
                flag = {"unload_dependents": ("bool_param", True)} if msg.unload_dependents else {}
                await self.dp.unload_model("", msg.model_name, flag)
            else:
                raise PbdError(Code.INVALID_ARG, f"unknown model-control operation {msg.op!r}")
        except PbdError as exc:
            reply.response.error.CopyFrom(wpb.Error(code=exc.code.value, message=exc.message))
        self._reply(caller, reply)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for key in list(self._held):
            self._release(*key)


def _caller_view(caller: Instance, ref: wpb.TensorRef) -> memoryview:
    """The bytes of a BLS input, in the caller's own segments, the daemon's for it, or (an
    input it was given, passed on) a front end's arena."""
    if not ref.nbytes:
        return memoryview(b"")
    memory = caller.memory
    own = memory.arena.find(ref.region)
    if own is not None:
        return own.view(ref.offset, ref.nbytes)
    try:
        lent_data = lent.view(ref.region, ref.offset, ref.nbytes)
        if lent_data is not None:
            return lent_data
        return memory.worker_segments.view(ref.region, ref.offset, ref.nbytes)
    except (ValueError, OSError) as exc:
        raise PbdError(Code.INVALID_ARG, f"BLS input '{ref.name}': {exc}") from None


def _refused(model: str, why: str) -> PbdError:
    """Triton's error for a BLS call refused before it is queued (python_backend's request
    executor words them so, all INTERNAL)."""
    reason = why.format(model=model)
    return PbdError(Code.INTERNAL, f"Model {model} - Error when running inference: {reason}")
