"""Run one batch through the model: descriptors in, descriptors out.

Inputs are handed to the model as numpy views over the daemon's segments (no copy). Each
output is written once into the worker's output arena, except when the model returned an
array that already lies inside a mapped segment (an identity model returning its input): then
the descriptor points at those bytes and nothing is copied. Output blocks stay allocated until
the daemon sends ``Release`` for the batch.

Requests may also be answered with the response sender (``pbd_worker.live_requests``), from
other threads: the arena and the segment map are used under ``lock``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pbd_wire import dtypes
from pbd_wire import worker_pb2 as wpb
from pbd_wire.bytes_input import BytesInputError, check_bytes_input
from pbd_wire.cuda import CudaRegions, CudaUnavailable
from pbd_wire.shm import Arena, Block, SegmentMap, ShmExhausted
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.live_requests import LiveRequests
from pbd_worker.loader import describe_exception
from pbd_worker.model_api.errors import TritonError
from pbd_worker.model_api.helpers import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response import InferenceResponse
from pbd_worker.model_api.tensor import Tensor
from pbd_worker.output_targets import OutputTooLarge, to_arena, to_client
from pbd_worker.rescheduling import rescheduled, unanswered
from pbd_worker.returns import check_returned

if TYPE_CHECKING:
    from pbd_worker.tracing import WorkerTracing

log = logging.getLogger("pbd_worker")

_EMPTY = memoryview(b"")
_NO_ID = "<id_unknown>"  # how Triton's messages name a request without an id
# Triton's gRPC front end, when a default-mode request got a response and then an error.
_TWO_RESPONSES = "expected a single response, got 2"
# A sender waiting for its responses' release looks again this often whether its request is
# still live (an end wakes it only through a release).
RELEASE_RECHECK_S = 0.1
# While the main thread runs execute() it reads no release: a sender past its window then
# waits this long for execute() to return before it goes on unpaced. A thread started in
# execute() runs before the main thread has the GIL back to return (up to a switch
# interval, 5 ms), and would send its whole burst unpaced; a model whose execute() waits
# for its own sending threads (a join) must not wait for ever.
IN_EXECUTE_WAIT_S = 0.002


def _error(code: str, message: str, tb: str = "") -> wpb.Error:
    return wpb.Error(code=code, message=message, traceback=tb)


def _code_of(exc: BaseException) -> str:
    if isinstance(exc, TritonError):
        return exc.code()
    if isinstance(exc, asyncio.CancelledError):
        return TritonError.CANCELLED
    return TritonError.INTERNAL


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class BatchExecutor:
    def __init__(
        self,
        model: Any,
        *,
        instance_name: str,
        model_name: str,
        model_version: int,
        inputs: SegmentMap,
        outputs: Arena,
        aio: WorkerLoop,
        live: LiveRequests | None = None,
        gpu_inputs: bool = False,
        cuda: CudaRegions | None = None,
        declared_outputs: frozenset[str] | None = None,
    ) -> None:
        self.model = model
        # What a response may carry when the client names no outputs: as Triton, whose core
        # requests every declared output, outputs the config does not declare are dropped.
        self.declared_outputs = declared_outputs
        self._undeclared_seen: set[str] = set()
        self.instance_name = instance_name
        self.model_name = model_name
        self.model_version = model_version
        self.inputs = inputs
        self.outputs = outputs
        self.aio = aio
        self.cuda = cuda or CudaRegions()  # clients' CUDA regions and pools, opened on use
        self.gpu_inputs = gpu_inputs  # CUDA inputs stay on the GPU (pbd_wire.cuda)
        self._held: dict[int, list[Block]] = {}
        # A batch formed here from several Executes (``run_parts``): its blocks, by each part's
        # batch id, until every part is released.
        self._shared: dict[int, tuple[list[Block], set[int]]] = {}
        # The running batch's input arrays over the daemon's segments, by id: an output that is
        # one of them (an identity model) is found in place without its address. The array is
        # kept with its (region, offset, nbytes), so an id is never one of another array.
        self._origins: dict[int, tuple[np.ndarray, str, int, int]] = {}
        self.lock = threading.Lock()
        # A decoupled request's streamed responses not released yet, and the request each
        # held id is of: its sender waits while too many are (``wait_released``).
        self._unreleased: dict[int, int] = {}
        self._held_for: dict[int, int] = {}
        self._waiting: dict[int, threading.Condition] = {}  # by request: its sender waits
        # The main thread is inside execute(): it reads no release meanwhile, so a sender
        # waits for one only IN_EXECUTE_WAIT_S (a model may wait in execute() for its own
        # sending threads).
        self._in_execute = False
        # When the execute() running now began (time.monotonic()); 0.0: none runs.
        self.execute_began = 0.0
        self.live = live if live is not None else LiveRequests(lambda *m: None, False)
        self.live.executor = self
        # Created by the first traced request (see pbd_worker.tracing).
        self.tracing: WorkerTracing | None = None
        self._untraceable = False

    def _tracing_for(self, msgs: list[wpb.Request]) -> WorkerTracing | None:
        for msg in msgs:
            if msg.traceparent:
                break
        else:
            return None  # nearly always: no request is traced
        if self._untraceable:
            return None
        if self.tracing is None:
            import gc

            try:
                from pbd_worker.tracing import WorkerTracing
            except ImportError as exc:
                # A model in its own environment (EXECUTION_ENV_PATH) without the OpenTelemetry
                # SDK: its requests are served, the worker's spans are not recorded.
                log.warning("not tracing in this worker: %s", exc)
                self._untraceable = True
                return None
            self.tracing = WorkerTracing()
            gc.freeze()  # the SDK just loaded: it stays, keep it out of the collector's way
        return self.tracing

    def rebind(self, inputs: SegmentMap, outputs: Arena) -> None:
        """New segments after a daemon restart; blocks of the old arena are void."""
        with self.lock:
            self._held.clear()
            self._shared.clear()
            self._held_for.clear()
            self._unreleased.clear()
            for waiting in self._waiting.values():
                waiting.notify()
        self.inputs, self.outputs = inputs, outputs

    def held_batches(self) -> list[int]:
        return [*self._held, *self._shared]

    def sweep_inputs(self) -> None:
        """Unmap the input segments whose owners let them go (a front end that exited):
        our mapping would otherwise keep their memory alive."""
        self.inputs.sweep()

    def release(self, batch_ids: list[int]) -> None:
        with self.lock:
            for batch_id in batch_ids:
                request_id = self._held_for.pop(batch_id, None)
                if request_id is not None:
                    self._one_released(request_id)
                blocks = self._held.pop(batch_id, None)
                if blocks is None:
                    shared = self._shared.pop(batch_id, None)
                    if shared is None:
                        continue
                    shared[1].discard(batch_id)
                    if shared[1]:
                        continue  # another part of the batch still reads its outputs
                    blocks = shared[0]
                for block in blocks:
                    self.outputs.free(block)

    def hold(self, held_id: int, blocks: list[Block], request_id: int = 0) -> None:
        """Keep a streamed response's output blocks until ``held_id`` is released; counted
        against ``request_id`` (0: not paced) meanwhile."""
        with self.lock:
            self._held[held_id] = blocks
            if request_id:
                self._held_for[held_id] = request_id
                self._unreleased[request_id] = self._unreleased.get(request_id, 0) + 1

    def wait_released(self, request_id: int, most: int, live: Callable[[], bool]) -> None:
        """Until fewer than ``most`` of ``request_id``'s streamed responses wait to be
        released, or it is no longer ``live`` (ended, its reader gone). A model thread's."""
        with self.lock:
            if self._unreleased.get(request_id, 0) < most:
                return
            # One condition a request: a release wakes its own sender, not every model thread.
            waiting = self._waiting[request_id] = threading.Condition(self.lock)
            try:
                while self._unreleased.get(request_id, 0) >= most and live():
                    if not self._in_execute:
                        waiting.wait(RELEASE_RECHECK_S)
                    elif not waiting.wait(IN_EXECUTE_WAIT_S) and self._in_execute:
                        return  # execute() goes on (it may wait for this thread): unpaced
            finally:
                del self._waiting[request_id]

    def _executing(self, inside: bool) -> None:
        """The main thread enters or leaves execute(): waiting senders look again (entering,
        they stop waiting for releases soon; leaving, they wait for them again)."""
        with self.lock:
            self._in_execute = inside
            for waiting in self._waiting.values():
                waiting.notify()

    def _one_released(self, request_id: int) -> None:
        left = self._unreleased[request_id] - 1
        if left:
            self._unreleased[request_id] = left
        else:
            del self._unreleased[request_id]
        waiting = self._waiting.get(request_id)
        if waiting is not None:
            waiting.notify()

    def build_response(
        self, msg: wpb.Request, request: InferenceRequest, response: InferenceResponse,
        held: list[Block],
    ) -> wpb.Response:  # fmt: skip
        """A response's descriptor, its outputs written into the arena (any thread)."""
        with self.lock:
            return self._response(msg, request, response, held, wpb.Response())

    def _request(self, msg: wpb.Request) -> InferenceRequest:
        tensors = []
        origins = self._origins
        segments = self.inputs.segments
        for ref in msg.inputs[:]:  # a list: iterating the field itself is slower
            if ref.HasField("cuda"):
                tensors.append(self._cuda_input(ref))
                continue
            nbytes = ref.nbytes
            if not nbytes:
                tensors.append(Tensor._over_bytes(ref.name, ref.datatype, ref.shape[:], _EMPTY))
                continue
            region, offset = ref.region, ref.offset
            end = offset + nbytes  # uint64s: never negative
            segment = segments.get(region)
            if segment is not None and end <= segment.size:  # SegmentMap.view, inlined
                view = segment.buffer[offset:end]
            else:  # not mapped yet, or out of range (its error)
                view = self.inputs.view(region, offset, nbytes)
            tensor = Tensor._over_bytes(ref.name, ref.datatype, ref.shape[:], view)
            array = tensor._array
            if "#" not in region:  # a daemon segment, not a client's
                if array is not None:
                    origins[id(array)] = (array, region, offset, nbytes)
            elif ref.datatype == "BYTES":  # in a client's region: only a worker reads those
                count = math.prod(ref.shape)
                check_bytes_input(view, count, ref.name, self.model_name, msg.id or _NO_ID)
            tensors.append(tensor)
        which = msg.WhichOneof("correlation")
        correlation: int | str = (
            msg.correlation_id_str if which == "correlation_id_str" else (msg.correlation_id)
        )
        return InferenceRequest._from_runtime(
            inputs=tensors,
            request_id=msg.id,
            correlation_id=correlation,
            requested_output_names=msg.requested_outputs[:],
            flags=msg.flags,
            timeout=msg.timeout_us,
            parameters_json=msg.parameters_json or "{}",
            model_name=self.model_name,
            model_version=self.model_version,
            trace_context=None,
        )

    def run(self, execute: wpb.Execute, into: wpb.ExecuteResult | None = None) -> wpb.ExecuteResult:
        """Run the batch; its result is written into ``into`` (a frame's field: protobuf
        copies a message handed to a constructor) or a new message."""
        result = into if into is not None else wpb.ExecuteResult()
        try:
            # protobuf makes a new wrapper on every walk: the list, once
            return self._run(execute.batch_id, execute.requests[:], result)
        finally:
            # No lock: a sender thread that reads it meanwhile finds an entry or looks the
            # array up by address (dict operations are atomic).
            self._origins.clear()

    def run_parts(self, parts: list[wpb.Execute], results: list[wpb.ExecuteResult]) -> None:
        """Run the requests of several Executes as one batch, one ``execute()`` (a batch the
        worker formed from its front links, ``pbd_worker.front_batcher``). ``results[i]`` answers
        ``parts[i]``: its own requests' responses, the whole batch's timings and ``merged``;
        the first part with a request that did not fail carries the rows the batch executed
        without failing (``batch_rows``), so the execution is counted once. The outputs stay
        held until every part is released (they are filed under the first part's id)."""
        msgs: list[wpb.Request] = []
        owner: dict[int, tuple[int, int]] = {}  # request id -> (part, rows)
        for index, part in enumerate(parts):
            requests = part.requests[:]
            msgs.extend(requests)
            for request in requests:
                refs = request.inputs
                shape = refs[0].shape if refs else ()
                owner[request.request_id] = (index, shape[0] if shape else 1)
        first = parts[0].batch_id
        try:
            result = self._run(first, msgs, wpb.ExecuteResult())
        finally:
            self._origins.clear()  # as in ``run``
        ids = {part.batch_id for part in parts}
        with self.lock:
            blocks = self._held.pop(first, None)
            if blocks:
                shared = (blocks, ids)
                for batch_id in ids:
                    self._shared[batch_id] = shared
        counted = -1
        executed_rows = 0
        timings = result.input_ns, result.infer_ns, result.output_ns
        span = result.execute_span if result.HasField("execute_span") else None
        for part, out in zip(parts, results, strict=True):
            out.batch_id = part.batch_id
            out.merged = True
            out.input_ns, out.infer_ns, out.output_ns = timings
            if span is not None:
                out.execute_span.CopyFrom(span)
        for response in result.responses:
            index, rows = owner.get(response.request_id, (0, 1))
            results[index].responses.append(response)
            if not response.HasField("error"):
                executed_rows += rows
                counted = index if counted < 0 else counted
        if counted >= 0:
            results[counted].batch_rows = executed_rows

    def _run(
        self, batch_id: int, msgs: list[wpb.Request], result: wpb.ExecuteResult
    ) -> wpb.ExecuteResult:
        """Run the batch ``msgs`` (its outputs held under ``batch_id``) into ``result``."""
        result.batch_id = batch_id
        ids = [r.request_id for r in msgs]
        began = time.perf_counter_ns()
        try:
            with self.lock:
                requests = [self._request(r) for r in msgs]
        except BytesInputError:
            msgs, requests = self._refuse_malformed(result, msgs)
            if not requests:
                return result
            ids = [m.request_id for m in msgs]
        except Exception as exc:  # noqa: BLE001 - a bad descriptor fails the batch, not the worker
            for request_id in ids:
                self.live.done(request_id)
            if isinstance(exc, CudaUnavailable):
                return self._fail_all(result, ids, _error("UNSUPPORTED", str(exc)))
            return self._fail_all(result, ids, _error("INTERNAL", f"bad request descriptor: {exc}"))
        self.live.start_batch(ids, msgs, requests)
        if any(r.is_cancelled() for r in requests):
            msgs, requests = self._drop_cancelled(result, msgs, requests)
            if not requests:
                return result
            ids = [m.request_id for m in msgs]
        inputs_done = time.perf_counter_ns()
        result.input_ns = inputs_done - began
        tracing = self._tracing_for(msgs)
        try:
            if tracing is None:  # nearly always: no span to open
                responses = self._call_execute(requests)
            else:
                traceparents = [r.traceparent for r in msgs]
                with tracing.execute_span(traceparents, result.execute_span) as traces:
                    for request, request_trace in zip(requests, traces, strict=False):
                        if request_trace is not None:
                            request._trace = request_trace
                    responses = self._call_execute(requests)
        except MemoryError:
            raise  # the process is out of memory: the worker exits and is replaced
        except Exception as exc:  # noqa: BLE001 - model code may raise anything
            text, tb = describe_exception(exc)
            message = (
                f"Failed to process the request(s) for model '{self.instance_name}', "
                f"message: {text}"
            )
            code = "INTERNAL"
            if isinstance(exc, TritonError):
                code = exc._code_name()
            return self._fail_open(result, requests, _error(code, message, tb))
        executed = time.perf_counter_ns()
        result.infer_ns = executed - inputs_done
        problem = check_returned(responses, requests, self.live.decoupled, self.instance_name)
        if problem:
            return self._fail_open(result, requests, _error("INTERNAL", self._failed(problem)))
        if not responses:
            responses = [None] * len(requests)
        # The requests execute() answered are done (no longer live) as it finishes.
        answered = [i for i, response in zip(ids, responses, strict=True) if response is not None]
        unfinished = self.live.finish_execute(ids, answered)
        held: list[Block] = []
        with self.lock:
            for request_msg, request_id, request, response in zip(
                msgs, ids, requests, responses, strict=True
            ):
                if response is None:  # answered with the response sender, or rescheduled
                    held_back = unfinished.get(request_id)
                    if held_back is not None and not rescheduled(request):
                        self.live.send_final(held_back)
                    result.responses.append(unanswered(request_id, request, self.live))
                    continue
                self._response(request_msg, request, response, held, result.responses.add())
            if held:
                self._held[batch_id] = held
        result.output_ns = time.perf_counter_ns() - executed
        return result

    def _call_execute(self, requests: list[InferenceRequest]) -> Any:
        """``execute(requests)`` (``_execute``), its start kept meanwhile in ``execute_began``
        for the execute() time limit (``WorkerRuntime._heartbeat``)."""
        self.execute_began = time.monotonic()
        try:
            return self._execute(requests)
        finally:
            self.execute_began = 0.0

    def _execute(self, requests: list[InferenceRequest]) -> Any:
        """``execute(requests)``. A default-mode ``async def execute`` is awaited on the
        worker's event loop; a decoupled model's runs there in the background, as in Triton:
        execute "returns" at once and the next batch may start. If that coroutine raises or is
        cancelled, its requests still open are closed with the error (Triton only logs it)."""
        self._executing(True)
        try:
            returned = self.model.execute(requests)
        finally:
            self._executing(False)
        if type(returned) is list or not inspect.isawaitable(returned):
            return returned
        if not self.live.decoupled:
            return self.aio.run(returned)
        self.aio.spawn(_awaited(returned), lambda exc: self._failed_in_background(requests, exc))
        return None

    def _failed_in_background(self, requests: list[InferenceRequest], exc: BaseException) -> None:
        text, tb = describe_exception(exc)
        if isinstance(exc, asyncio.CancelledError):
            text = "the execute() coroutine was cancelled"
        log.error("async execute() failed in the background: %s\n%s", text, tb)
        error = TritonError(self._failed(text), _code_of(exc))
        for request in requests:
            sender = request.get_response_sender()
            if not sender._is_closed:
                sender._close()
                self.live._deliver(
                    request, InferenceResponse(error=error), TRITONSERVER_RESPONSE_COMPLETE_FINAL
                )

    def _drop_cancelled(
        self, result: wpb.ExecuteResult, msgs: list[wpb.Request], requests: list[InferenceRequest]
    ) -> tuple[list[wpb.Request], list[InferenceRequest]]:
        """Requests cancelled while they waited in this worker's pipeline do not run (as a
        cancelled request in Triton's queue); the rest of the batch does."""
        kept: tuple[list[wpb.Request], list[InferenceRequest]] = ([], [])
        for msg, request in zip(msgs, requests, strict=True):
            if request.is_cancelled():
                self.live.done(msg.request_id)
                error = _error("CANCELLED", "the request was cancelled before it ran")
                result.responses.append(wpb.Response(request_id=msg.request_id, error=error))
            else:
                kept[0].append(msg)
                kept[1].append(request)
        return kept

    def _refuse_malformed(
        self, result: wpb.ExecuteResult, msgs: list[wpb.Request]
    ) -> tuple[list[wpb.Request], list[InferenceRequest]]:
        """A BYTES input in a client's region does not hold its shape: that request is
        refused as Triton refuses it before the model (INVALID_ARG, its message); the rest of
        the batch runs."""
        kept: tuple[list[wpb.Request], list[InferenceRequest]] = ([], [])
        with self.lock:
            for msg in msgs:
                try:
                    request = self._request(msg)
                except BytesInputError as exc:
                    self.live.done(msg.request_id)
                    error = _error("INVALID_ARG", str(exc))
                    result.responses.append(wpb.Response(request_id=msg.request_id, error=error))
                    continue
                kept[0].append(msg)
                kept[1].append(request)
        return kept

    def _failed(self, text: str) -> str:
        return f"Failed to process the request(s) for model '{self.instance_name}', message: {text}"

    def _fail_open(
        self, result: wpb.ExecuteResult, requests: list[InferenceRequest], error: wpb.Error
    ) -> wpb.ExecuteResult:
        """Fail every request not answered yet; close every response sender (as Triton). A
        request whose sender sent its response without the final flag has two answers now:
        both go, the second as Triton's "expected a single response, got 2"."""
        unfinished = self.live.finish_execute([r._uid for r in requests])  # type: ignore[attr-defined]
        for request in requests:
            request_id = request._uid  # type: ignore[attr-defined]
            sender = request._response_sender
            finished = sender is not None and sender._is_closed
            if sender is not None:
                sender._close()
            self.live.done(request_id)
            if request_id in unfinished:
                self.live.send_then_fail(unfinished[request_id], _error("INTERNAL", _TWO_RESPONSES))
                result.responses.append(wpb.Response(request_id=request_id, streamed=True))
            elif finished:
                result.responses.append(wpb.Response(request_id=request_id, streamed=True))
            else:
                result.responses.append(wpb.Response(request_id=request_id, error=error))
        return result

    def _fail_all(
        self, result: wpb.ExecuteResult, ids: list[int], error: wpb.Error
    ) -> wpb.ExecuteResult:
        del result.responses[:]
        for request_id in ids:
            result.responses.append(wpb.Response(request_id=request_id, error=error))
        return result

    def _response(
        self,
        msg: wpb.Request,
        request: InferenceRequest,
        response: InferenceResponse,
        held: list[Block],
        out: wpb.Response,
    ) -> wpb.Response:
        """``response``'s descriptor, written into ``out`` (a new message, or a result's
        entry: protobuf copies a message that is appended)."""
        out.request_id = msg.request_id
        err = response.error()
        if err is not None:
            out.error.CopyFrom(_error(err._code_name(), err.message()))
            return out
        params = response.parameters()
        if params and params != "{}":
            out.parameters_json = params
        names = request._requested_output_names
        requested = set(names) if names else self.declared_outputs
        targets = {t.name: t for t in msg.output_targets} if msg.output_targets else None
        try:
            for tensor in response.output_tensors():
                if requested is not None and tensor.name() not in requested:
                    # Triton prunes outputs the client did not ask for, and undeclared ones.
                    if not names:
                        self._undeclared(tensor.name())
                    continue
                target = targets.get(tensor.name()) if targets is not None else None
                if target is not None:
                    out.outputs.append(to_client(tensor, target, self.inputs, self.cuda))
                else:
                    to_arena(
                        tensor, held, self.inputs, self.outputs, out.outputs.add(), self._origins
                    )
        except ShmExhausted as exc:
            del out.outputs[:]
            out.error.CopyFrom(_error("RESOURCE_EXHAUSTED", exc.message))
        except OutputTooLarge as exc:
            del out.outputs[:]
            out.error.CopyFrom(_error("INTERNAL", str(exc)))
        except CudaUnavailable as exc:
            del out.outputs[:]
            out.error.CopyFrom(_error("UNSUPPORTED", str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bad output tensor fails its request
            del out.outputs[:]
            text, tb = describe_exception(exc)
            out.error.CopyFrom(_error("INTERNAL", f"invalid output from model: {text}", tb))
        return out

    def _undeclared(self, name: str) -> None:
        if name not in self._undeclared_seen:  # once per name: it comes with every response
            self._undeclared_seen.add(name)
            log.debug(
                "%s: dropped output '%s': the model's config does not declare it (as Triton)",
                self.instance_name,
                name,
            )

    def _cuda_input(self, ref: wpb.TensorRef) -> Tensor:
        """An input in a client's CUDA region: on the GPU for a model that takes GPU inputs,
        else copied once to the host."""
        dt = dtypes.BY_NAME.get(ref.datatype)
        if self.gpu_inputs and dt is not None and dt.numpy is not None and not dt.is_bytes:
            array = self.cuda.array(ref.cuda, ref.offset, ref.nbytes, dt.numpy, list(ref.shape))
            return Tensor._from_device(ref.name, ref.datatype, array, ref.cuda.device_id)
        host = self.cuda.to_host(ref.cuda, ref.offset, ref.nbytes)
        return Tensor._from_buffer(ref.name, ref.datatype, list(ref.shape), host.data)

    def forget_cuda_regions(self, generations: list[int]) -> None:
        self.cuda.forget(generations)
