"""The daemon as a front-end process sees it: the ``InferencePlane`` its edges run requests on,
over the link to the daemon (``protos/pbd/_proto/front.proto``).

A request's input bytes are copied once, from the message the client sent into this process's
arena (the one copy in: the worker reads them there), and the daemon gets their descriptors.
Its answer names where the outputs lie (a worker's segments, mapped here once and kept); the
edge encodes from there (the one copy out) and releases the result, which tells the daemon it
may let the worker reuse them. The arena's blocks come back when the daemon says no worker
reads them any more (``InputsFree``), never earlier: a cancelled request's inputs may still be
in a worker's hands.

An answer is handed on where its frame is read: a ModelInfer whose edge can answer it itself
(``InferRequest.respond``) is encoded and sent in that read, before its task resumes.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pbd._proto import front_pb2 as fpb
from pbd.errors import Code, PbdError, unavailable
from pbd.fronts import wire
from pbd.fronts.direct import Direct
from pbd.fronts.direct_link import DirectVersion
from pbd.grpc.protocol import Abort, Buffer, Context
from pbd.memory.malloc import FloodTrim
from pbd.modelconfig.model import ModelConfig
from pbd.responses import ResponseStream, StreamResult
from pbd.types import InferRequest, InferResult, ShmSlice
from pbd_wire.framing import FrameError, FrameSplitter, encode_frame
from pbd_wire.shm import Arena, Block, SegmentMap, ShmExhausted

log = logging.getLogger("pbd.fronts")
# How long a table's barrier waits for requests on instances it took off the direct path (the
# daemon waits as long as its unload's grace, then stops them anyway).
DRAIN_WAIT_S = 600.0
_HEARTBEAT = encode_frame(fpb.FrontToDaemon(heartbeat=fpb.Heartbeat()).SerializeToString())


class _DaemonCall:
    """One request sent to the daemon, until its input blocks may be reused: no worker reads
    them any more (the final answer says so, or InputsFree for a request given up on), and no
    result of it is still read (an output may be an input returned in place)."""

    __slots__ = ("request", "blocks", "future", "stream", "gone", "final", "free", "results")

    def __init__(
        self,
        request: InferRequest,
        blocks: list[Block],
        future: asyncio.Future[InferResult] | None,
        stream: ResponseStream | None,
    ) -> None:
        self.request = request
        self.blocks = blocks
        self.future = future
        self.stream = stream
        self.gone = False  # the caller gave up: answers are let go at once
        self.final = False  # the final answer came
        self.free = False  # no worker reads the inputs any more
        self.results = 0  # results handed on and not released yet

    @property
    def over(self) -> bool:
        return self.free and not self.results and (self.final or self.gone)


@dataclass(frozen=True, slots=True)
class _TraceLater:
    """``start_trace``'s arguments until the request goes to the daemon."""

    method: str
    system: str
    start_ns: int
    traceparent: Callable[[], str | None]

    def ask(self) -> wire.TraceAsk:
        return wire.TraceAsk(self.method, self.system, self.start_ns, self.traceparent() or "")


class RemotePlane(asyncio.Protocol):
    def __init__(self, arena: Arena, segments: SegmentMap) -> None:
        self.arena = arena
        self.segments = segments  # the daemon's and its workers' segments, mapped on first use
        self.transport: asyncio.Transport | None = None
        self.decoupled: frozenset[str] = frozenset()
        self.on_log_levels: Callable[[fpb.LogLevels], None] = lambda levels: None
        self.stop_grace: float | None = None
        self.daemon_stopping = False  # the daemon drains and orders this front end's stop
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loop = asyncio.get_running_loop()
        self._frames = FrameSplitter()
        self._ids = itertools.count(1)
        self._pending: dict[int, _DaemonCall] = {}
        self._replies: dict[int, asyncio.Future[fpb.CallReply]] = {}
        self._released: list[int] = []
        self._flush: asyncio.Handle | None = None
        self._models = asyncio.Event()  # the first model table came
        # The direct path (``pbd.fronts.direct``): requests of the versions the daemon lists
        # go straight to workers. None: every request goes through the daemon.
        self.direct: Direct | None = None
        self._barriers: set[asyncio.Future[None]] = set()  # barriers waiting for a drain
        # The heap a flood of large requests took goes back once idle (the daemon does the
        # same in its --max-queued-bytes budget): nothing held is an empty arena.
        self.flood = FloodTrim(lambda: self.arena.used > 0)

    def direct_path(self, index: int, shm_dir: str, budget_bytes: int = 0) -> Direct:
        """Turn the direct path on (before the link's first table); ``budget_bytes``: the
        input bytes of direct requests it may hold (``pbd.fronts.front.direct_bytes``)."""
        self.direct = Direct(
            index, shm_dir, self._view, lambda region: self.arena.find(region) is not None,
            self._free, budget_bytes,
        )  # fmt: skip
        return self.direct

    async def ready(self) -> None:
        """Until the daemon sent its first model table (it answers the Hello with it)."""
        await self._models.wait()

    # -- the InferencePlane ---------------------------------------------------------------------

    def is_decoupled(self, request: InferRequest) -> bool:
        return request.model_name in self.decoupled

    def runs_here(self, model: str, version: str) -> bool:
        """Whether this front end runs the version's generate and OpenAI requests itself: a
        version on its direct path (its configuration came with the table)."""
        return self.direct is not None and (model, version) in self.direct.versions

    def model_config(self, name: str, version: str) -> ModelConfig:
        return self._direct_version(name, version).config

    def model_directories(self, name: str, version: str) -> list[Path]:
        return [Path(path) for path in self._direct_version(name, version).directories]

    def _direct_version(self, name: str, version: str) -> DirectVersion:
        found = self.direct.versions.get((name, version)) if self.direct is not None else None
        if found is None:  # ``runs_here`` said yes, and the table changed since
            raise PbdError(
                Code.UNAVAILABLE, f"model '{name}' left this front end's direct path; try again"
            )
        return found

    def start_trace(
        self,
        request: InferRequest,
        method: str,
        start_ns: int,
        traceparent: Callable[[], str | None],
        system: str = "grpc",
    ) -> None:
        """None: the daemon traces (its settings and sampling are one for every front end);
        what it needs rides on the request, asked for only if the request goes to the daemon
        (the direct path traces nothing: the client's metadata is not read for it)."""
        request.trace = _TraceLater(method, system, start_ns, traceparent)

    async def infer(self, request: InferRequest) -> InferResult:
        direct = self.direct
        if direct is not None and (version := direct.route(request)) is not None:
            result = await direct.infer(request, version, self._place_direct)
            if result is not None:
                return result
        future: asyncio.Future[InferResult] = self._loop.create_future()
        call = self._submit(request, future, None)
        try:
            return await future
        except asyncio.CancelledError:
            self._give_up(call)
            raise

    async def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamResult, None]:
        direct = self.direct
        if direct is not None and (version := direct.route(request)) is not None:
            started = direct.stream(request, version, self._place_direct)
            if started is not None:
                async for item in started:
                    yield item
                return
        stream = ResponseStream(request.on_response)
        call = self._submit(request, None, stream)
        try:
            async for item in stream:
                yield item
        finally:
            if not stream.finished:
                self._give_up(call)
            stream.close()

    # -- the other RPCs -------------------------------------------------------------------------

    async def call(self, path: str, body: Buffer, context: Context) -> bytes:
        """Have the daemon run the unary RPC at ``path`` (``pbd.grpc.servicer.methods``)."""
        call = next(self._ids)
        future: asyncio.Future[fpb.CallReply] = self._loop.create_future()
        self._replies[call] = future
        message = fpb.FrontToDaemon()
        message.call.call, message.call.path, message.call.body = call, path, bytes(body)
        for key, value in context.invocation_metadata():
            raw = value if isinstance(value, bytes) else value.encode("latin-1")
            message.call.metadata.add(key=key, value=raw)
        self._write(encode_frame(message.SerializeToString()))
        try:
            reply = await future
        except asyncio.CancelledError:
            self._write(_cancel_frame(call))
            raise
        finally:
            self._replies.pop(call, None)
        if reply.code:
            raise Abort(_status(reply.code), reply.details)
        return reply.body

    # -- sending --------------------------------------------------------------------------------

    def _submit(
        self,
        request: InferRequest,
        future: asyncio.Future[InferResult] | None,
        stream: ResponseStream | None,
    ) -> int:
        call = next(self._ids)
        blocks, places = self._place(request)
        if self.transport is None or self.transport.is_closing():
            self._free(blocks)
            raise unavailable("the daemon is not reachable from this front end")
        self._pending[call] = _DaemonCall(request, blocks, future, stream)
        trace = request.trace.ask() if isinstance(request.trace, _TraceLater) else None
        release, self._released = self._released, []
        frame = wire.infer_frame(
            call, request, places, stream=stream is not None, trace=trace, release=release
        )
        self.transport.write(frame)
        return call

    def _place(self, request: InferRequest) -> tuple[list[Block], list[wire.Place]]:
        """Copy the request's input bytes into the arena: the blocks, and where each input
        lies (None: it names a client's region instead)."""
        blocks: list[Block] = []
        places: list[wire.Place] = []
        total = 0
        try:
            for tensor in request.inputs:
                data = tensor.data
                if data is None:
                    places.append(None)
                elif not data.nbytes:
                    places.append(("", 0, 0))
                else:
                    block = self.arena.allocate(data.nbytes)
                    blocks.append(block)
                    block.view()[:] = data.cast("B") if data.format != "B" else data
                    places.append((block.segment.name, block.offset, block.nbytes))
                    total += block.nbytes
        except ShmExhausted as exc:
            self._free(blocks)
            raise PbdError(Code.RESOURCE_EXHAUSTED, exc.message) from None
        finally:
            self.flood.came(total)
        return blocks, places

    def _place_direct(self, request: InferRequest) -> list[Block]:
        """``_place`` for the direct path: each input then reads from the arena, where the
        worker maps it (``placed``)."""
        blocks, places = self._place(request)
        for tensor, place in zip(request.inputs, places, strict=True):
            if place is not None and place[2]:
                region, offset, nbytes = place
                tensor.data = self._view(region, offset, nbytes)
                tensor.placed = ShmSlice(region, offset, nbytes)
        return blocks

    def _give_up(self, call: int) -> None:
        """The caller is gone: the daemon cancels the request; its inputs stay lent until
        the daemon gives them back."""
        pending = self._pending.get(call)
        if pending is not None and not pending.final:
            pending.gone = True
            self._write(_cancel_frame(call))

    def _release_hold(self, hold: int) -> None:
        self._released.append(hold)
        if self._flush is None:
            self._flush = self._loop.call_soon(self._send_released)

    def _send_released(self) -> None:
        """Holds released this loop turn that no Infer carried: one Release for them."""
        self._flush = None
        if self._released:
            holds, self._released = self._released, []
            message = fpb.FrontToDaemon(release=fpb.Release(holds=holds))
            self._write(encode_frame(message.SerializeToString()))

    def heartbeat(self) -> None:
        """Tell the daemon this front end serves and its loop turns."""
        self._write(_HEARTBEAT)

    def _write(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._frames.split(data):
                self._on(fpb.DaemonToFront.FromString(frame))  # type: ignore[arg-type]
        except (FrameError, ValueError) as exc:  # ValueError: protobuf's DecodeError
            log.error("the daemon sent an undecodable frame (%s)", exc)
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        error = unavailable("the daemon closed its connection to this front end")
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if item.future is not None and not item.future.done():
                item.future.set_exception(error)
            if item.stream is not None:
                item.stream.fail(error)
        for future in self._replies.values():
            if not future.done():
                future.set_exception(Abort(_status(14), error.message))
        if self.direct is not None:
            self.direct.close()
        if not self.ended.done():
            self.ended.set_result(None)

    # -- receiving ------------------------------------------------------------------------------

    def _on(self, message: fpb.DaemonToFront) -> None:
        kind = message.WhichOneof("kind")
        if kind == "answer":
            self._answer(message.answer)
        elif kind == "inputs_free":
            for call in message.inputs_free.calls:
                self._inputs_free(call)
        elif kind == "reply":
            future = self._replies.get(message.reply.call)
            if future is not None and not future.done():
                future.set_result(message.reply)
        elif kind == "models":
            self._on_models(message.models)
        elif kind == "instance_gone":
            if self.direct is not None:
                gone = message.instance_gone
                self.direct.instance_gone(gone.socket, gone.message)
        elif kind == "stats_ask":
            ask = message.stats_ask.ask
            report = self.direct.report(ask) if self.direct else fpb.StatsReport(ask=ask)
            self._write(encode_frame(fpb.FrontToDaemon(stats=report).SerializeToString()))
        elif kind == "log_levels":
            self.on_log_levels(message.log_levels)
        elif kind == "regions":
            regions = message.regions
            if self.direct is not None:
                self.direct.follow_regions(regions)
            if regions.barrier:
                self._synced(regions.barrier)
        elif kind == "regions_let_go":
            barrier = message.regions_let_go.barrier
            if self.direct is None:
                self._synced(barrier)
            else:
                let_go = asyncio.ensure_future(self.direct.regions_let_go())
                self._barriers.add(let_go)
                let_go.add_done_callback(self._barriers.discard)
                let_go.add_done_callback(lambda _done: self._synced(barrier))
        elif kind == "stop":
            if self.direct is not None:
                self.direct.clear()  # the daemon answers (refuses) whatever comes now
            self.stop_grace = message.stop.grace_s
            if not self.ended.done():
                self.ended.set_result(None)

    def _on_models(self, models: fpb.Models) -> None:
        """A new model table: the decoupled models, the direct path's versions. Its barrier is
        answered once it applies, and once nothing sent to instances it took off the direct
        path is unanswered."""
        self.decoupled = frozenset(models.decoupled)
        self.daemon_stopping = self.daemon_stopping or models.stopping
        if self.direct is not None:
            self.direct.update(list(models.direct))
        self._models.set()
        barrier = models.barrier
        if not barrier:
            return
        busy = self.direct.retired_busy() if self.direct is not None else []
        if not busy:
            self._synced(barrier)
            return
        assert self.direct is not None
        drained = asyncio.ensure_future(self.direct.drained(busy, DRAIN_WAIT_S))
        self._barriers.add(drained)  # the loop keeps only weak references to tasks
        drained.add_done_callback(self._barriers.discard)
        drained.add_done_callback(lambda _done: self._synced(barrier))

    def _synced(self, barrier: int) -> None:
        synced = fpb.FrontToDaemon(synced=fpb.Synced(barrier=barrier))
        self._write(encode_frame(synced.SerializeToString()))

    def _answer(self, answer: fpb.Answer) -> None:
        call = answer.call
        pending = self._pending.get(call)
        result: InferResult | None = None
        error: PbdError | None = None
        if answer.response:
            try:
                result = wire.result_from_answer(answer, self._view)
            except ValueError as exc:
                error = PbdError(Code.INTERNAL, f"an answer's outputs cannot be read: {exc}")
        if answer.HasField("error"):
            error = wire.error_from_answer(answer)
        if pending is not None:
            pending.final = pending.final or answer.final
            pending.free = pending.free or answer.inputs_free
        if result is not None:
            hold = answer.hold
            if pending is None or pending.gone:
                if hold:
                    self._release_hold(hold)
                result = None
            else:
                pending.results += 1
                result._release = functools.partial(self._result_released, call, hold)
        if pending is not None and not pending.gone:
            self._deliver(pending, result, error, answer.final)
        self._settle(call)

    def _result_released(self, call: int, hold: int) -> None:
        """The edge is done with a result: its outputs go back to the daemon."""
        if hold:
            self._release_hold(hold)
        pending = self._pending.get(call)
        if pending is not None:
            pending.results -= 1
            self._settle(call)

    def _deliver(
        self, pending: _DaemonCall, result: InferResult | None, error: PbdError | None, final: bool
    ) -> None:
        if pending.stream is not None:
            pending.stream.put(StreamResult(result, error, final))
            return
        future = pending.future
        assert future is not None
        if future.done():
            if result is not None:
                result.release()
        elif error is not None or result is None:
            future.set_exception(error or PbdError(Code.INTERNAL, "an answer without a response"))
        else:
            respond = pending.request.respond
            if respond is not None:
                respond(result)  # answered in this read, before the caller's task resumes
            future.set_result(result)

    def _inputs_free(self, call: int) -> None:
        pending = self._pending.get(call)
        if pending is not None:
            pending.free = True
            self._settle(call)

    def _settle(self, call: int) -> None:
        pending = self._pending.get(call)
        if pending is not None and pending.over:
            del self._pending[call]
            self._free(pending.blocks)

    def _free(self, blocks: list[Block]) -> None:
        if self.arena.segments:
            for block in blocks:
                self.arena.free(block)
        blocks.clear()

    def _view(self, region: str, offset: int, nbytes: int) -> memoryview:
        own = self.arena.find(region)
        if own is not None:  # an input returned in place
            return own.view(offset, nbytes)
        return self.segments.view(region, offset, nbytes)

    def sweep(self) -> None:
        """Unmap the segments whose owners let them go (their instance was stopped or
        replaced); a mapping a result still views goes with the last such view."""
        self.segments.sweep()

    def close(self) -> None:
        self.flood.close()
        if self.transport is not None:
            self.transport.close()


def _cancel_frame(call: int) -> bytes:
    return encode_frame(fpb.FrontToDaemon(cancel=fpb.Cancel(calls=[call])).SerializeToString())


def _status(code: int) -> Any:
    import grpc

    return next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)
