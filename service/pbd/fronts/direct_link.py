"""The link from a front end to one worker on the direct path (``worker.proto``, "The direct
path"), and what a request sent on it holds until it is done.

Ids: the front end numbers its requests (one per batch: the default scheduler does not batch)
from ``front_base(index)``, so a worker tells its links apart by id and a cancellation can be
marked on the instance's cancellation page at once, as the daemon marks its own.

What a request holds: its input blocks in the arena, until the worker can no longer read them
(its result came, or its final streamed response) and no result of it is still being encoded
(an output may be an input returned in place); the worker's output blocks, until the edge
released the result (``Release``, riding on the next Execute, as the daemon sends them).

A link that closes fails what it carries with UNAVAILABLE, in the daemon's words for the
worker's end when they come (``Direct.instance_gone``), in its own after ``GONE_WAIT_S``.
A link taken out of the table is sent nothing more and closes once nothing sent on it is
unanswered (``retired``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from pbd.corks import BLOCKS, corked, hold
from pbd.errors import NOT_RESCHEDULABLE, Code, PbdError, rejected, unavailable
from pbd.responses import ResponseStream, StreamResult
from pbd.stats import ModelStats, failure_reason
from pbd.types import InferRequest, InferResult, OutputTensor, PreparedRequest, batch_rows
from pbd.worker_client.describe import describe_request
from pbd.worker_client.error_log import ErrorBucket, log_failed_batch
from pbd.worker_client.releases import Outstanding, PendingReleases
from pbd.worker_client.results import FINAL, failed_share, json_params, stream_item
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.framing import FrameError, FrameSplitter, encode_frame, socket_address
from pbd_wire.shm import Block

if TYPE_CHECKING:
    from pbd._proto import front_pb2 as fpb
    from pbd.fronts.inflight import InflightTable
    from pbd.modelconfig.model import ModelConfig

log = logging.getLogger("pbd.fronts")
# How long the requests of a worker whose link ended wait for the daemon's words for its end
# (the daemon sees the process's exit status within about two seconds).
GONE_WAIT_S = 5.0
_EMPTY = memoryview(b"")

# (segment, offset, nbytes) -> a view: this front end's arena, or a worker's segment.
View = Callable[[str, int, int], memoryview]
# Is ``region`` one of this front end's arena segments (an input returned in place)?
Own = Callable[[str], bool]
# Frees input blocks in the arena.
Free = Callable[[list[Block]], None]


class Owner(Protocol):
    """What a link needs of the direct path it belongs to (``pbd.fronts.direct.Direct``)."""

    index: int  # the front end's
    held: int  # input bytes of requests in flight
    inflight: InflightTable | None
    reasons: dict[str, str]  # the daemon's words for workers' ends, by socket
    view: View
    own: Own
    free: Free

    def stats_of(self, version: DirectVersion) -> ModelStats: ...

    def release_regions(self, prepared: PreparedRequest) -> None: ...

    def lost(self, link: DirectLink) -> None: ...

    def forget_lost(self, link: DirectLink) -> None: ...


class DirectVersion:
    """One version the front end runs directly: its configuration and its instances' links."""

    __slots__ = ("model", "version", "config", "directories", "links", "key")

    def __init__(
        self, model: str, version: str, config: ModelConfig, directories: list[str] | None = None
    ) -> None:
        self.model = model
        self.version = version
        self.config = config
        self.directories = directories or []  # where its files lie (version's, then model's)
        self.links: list[DirectLink] = []
        self.key = (model, version)  # its statistics' (``Direct.stats_of``)

    def pick(self) -> DirectLink | None:
        """The connected instance with the fewest of this front end's requests in flight."""
        best: DirectLink | None = None
        least = -1
        for link in self.links:
            if link.usable and (best is None or len(link.calls) < least):
                best, least = link, len(link.calls)
        return best


class DirectCall(Outstanding):
    """A request sent to a worker, until its input blocks may be reused. As ``Outstanding``:
    its streamed responses the worker waits to hear released (a decoupled model's, paced)."""

    __slots__ = (
        "request", "prepared", "version", "blocks", "future", "stream", "gone", "holds", "final",
        "answered",
    )  # fmt: skip

    def __init__(
        self,
        request: InferRequest,
        prepared: PreparedRequest,
        version: DirectVersion,
        blocks: list[Block],
        future: asyncio.Future[InferResult] | None,
    ) -> None:
        super().__init__()
        self.request = request
        self.prepared = prepared
        self.version = version
        self.blocks = blocks
        # The caller's answer; None for a decoupled model's request, whose caller reads
        # ``stream`` (made at the start) instead.
        self.future = future
        self.stream: ResponseStream | None = None  # answered by the response sender
        self.gone = False  # the caller gave up
        self.holds = 1  # the worker may read the inputs (1), results not yet released
        self.final = False  # its final streamed response came (it may precede the result)
        self.answered = False  # a streamed response was put in its stream


class DirectLink(asyncio.Protocol):
    """This front end's connection to one instance's worker."""

    def __init__(self, direct: Owner, spec: fpb.DirectInstance) -> None:
        self.direct = direct
        self.name = spec.name
        self.socket = spec.socket
        self.token = spec.token
        self.cancel_region = spec.cancel_region
        self.slot = spec.load_slot  # where its in-flight count goes (pbd.fronts.inflight)
        self.transport: asyncio.Transport | None = None
        self.usable = False  # connected, and still in the table
        self.retired = False  # out of the table: finishes what it has, then closes
        self.closed = False
        self.calls: dict[int, DirectCall] = {}  # by request id (= batch id)
        self.streams: dict[int, DirectCall] = {}  # answered by the response sender, not final yet
        self.releases = PendingReleases(self._send_release)
        self.flags: CancelFlags | None = None
        self.errors = ErrorBucket()
        self.idle = asyncio.Event()  # nothing in flight (for a retired link's barrier)
        self.idle.set()
        self._give_up: asyncio.TimerHandle | None = None  # the daemon's words were not heard
        self._frames = FrameSplitter()
        # Frames read but not handled yet: they wait behind a stream's first response.
        self._later: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._kept: list[bytes] = []  # frames written in an open block (``pbd.corks``)

    # -- connecting ------------------------------------------------------------------------------

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, socket_address(self.socket))
            await loop.create_unix_connection(lambda: self, sock=sock)
        except OSError as exc:
            sock.close()
            log.warning("front end %d: cannot reach %s directly (%s); its requests go through "
                        "the daemon", self.direct.index, self.name, exc)  # fmt: skip
            self.closed = True
            return
        if self.cancel_region:
            try:
                self.flags = CancelFlags.attach(self.cancel_region)
            except (OSError, ValueError):
                self.flags = None  # cancellation then reaches the worker between batches

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        hello = wpb.DaemonToWorker(
            front_hello=wpb.FrontHello(token=self.token, front=self.direct.index)
        )
        transport.write(encode_frame(hello.SerializeToString()))
        self.usable = not self.retired and not self.closed

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.split(data)
        except FrameError as exc:
            log.error("%s sent an undecodable frame (%s); closing the link", self.name, exc)
            self.close()
            return
        if self._later:  # frames of an earlier read still wait their turn: these after them
            self._later.extend(frames)
        else:
            self._handle(frames)

    def _handle(self, frames: Iterable[bytes | bytearray | memoryview]) -> None:
        """The frames of a read, in order. After a stream's first response the rest wait
        for the next loop turn (``_later``), so that response leaves first: a burst of a
        decoupled model's responses would otherwise all be read before any is written.
        What they make the HTTP/2 connections write leaves at the end, a write each
        (``corked``): one read of the client's for a burst of tokens, not one a token."""
        it = iter(frames)
        with corked():
            try:
                for frame in it:
                    message = wpb.WorkerToDaemon.FromString(frame)  # type: ignore[arg-type]
                    kind = message.WhichOneof("kind")
                    if kind == "result":
                        self._on_result(message.result)
                    elif kind == "streamed" and self._on_streamed(message.streamed):
                        self._later.extend(it)
                        if self._later:
                            asyncio.get_running_loop().call_soon(self._handle_later)
                        return
            except ValueError as exc:
                log.error("%s sent an undecodable frame (%s); closing the link", self.name, exc)
                self.close()

    def _handle_later(self) -> None:
        later, self._later = self._later, collections.deque()
        if not self.closed:
            self._handle(later)

    def connection_lost(self, exc: Exception | None) -> None:
        """The worker is gone (or closed this link). What it had fails with the daemon's
        words for it (``InstanceGone``: how it died, or that it was stopped), which come
        when the daemon has seen its end; with this link's own after ``GONE_WAIT_S``."""
        self.usable = False
        self.closed = True
        if self.flags is not None:
            self.flags.close()
            self.flags = None
        self.direct.lost(self)
        reason = self.direct.reasons.get(self.socket)
        if reason is not None or not (self.calls or self.streams):
            self.fail_all(reason)
            return
        loop = asyncio.get_running_loop()
        self._give_up = loop.call_later(GONE_WAIT_S, self.fail_all, None)

    def fail_all(self, reason: str | None) -> None:
        """Fail what the gone worker had, with ``reason`` (None: that it closed the link)."""
        if self._give_up is not None:
            self._give_up.cancel()
            self._give_up = None
        self.direct.forget_lost(self)
        error = unavailable(reason or f"worker for {self.name} closed its connection")
        calls = {**self.calls, **self.streams}
        self.calls.clear()
        self.streams.clear()
        self._count()
        for call in calls.values():
            if call.future is not None and not call.future.done():
                call.future.set_exception(error)
            if call.stream is not None:
                call.stream.fail(error)
            self._drop_hold(call)
        self.idle.set()

    def _count(self) -> None:
        """Publish what this front end has at the instance (a scaled version's: ``slot``)."""
        inflight = self.direct.inflight
        if inflight is not None:
            inflight.publish(self.direct.index, self.slot, len(self.calls) + len(self.streams))

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()
        else:
            self.closed = True

    # -- sending ---------------------------------------------------------------------------------

    def send(self, request_id: int, call: DirectCall) -> None:
        frame = wpb.DaemonToWorker()
        execute = frame.execute
        execute.batch_id = request_id
        describe_request(request_id, call.prepared, [], execute.requests.add(), None)
        released = self.releases.take()
        if released:
            execute.release.extend(released)
        self.calls[request_id] = call
        self.idle.clear()
        if self.slot:
            self._count()
        self._write(encode_frame(frame.SerializeToString()))

    def cancel(self, request_id: int) -> None:
        """The caller gave up: the model sees it at once (``is_cancelled()``); the inputs
        stay lent until the worker is done with them."""
        call = self.calls.get(request_id) or self.streams.get(request_id)
        if call is None:
            return
        call.gone = True
        if call.stream is not None:
            call.stream.close()
        if self.flags is not None:
            self.flags.cancel(request_id)
        cancel = wpb.DaemonToWorker(cancel=wpb.CancelRequests(request_ids=[request_id]))
        self._write(encode_frame(cancel.SerializeToString()))

    def _send_release(self, ids: list[int]) -> None:
        release = wpb.DaemonToWorker(release=wpb.Release(batch_ids=ids))
        self._write(encode_frame(release.SerializeToString()))

    def _write(self, frame: bytes) -> None:
        """At once, or at the end of the open block (``pbd.corks``: the Executes of a
        client's read of several requests leave in one write)."""
        if self.transport is None or self.transport.is_closing():
            return
        if BLOCKS:
            if not self._kept:
                hold(self)
            self._kept.append(frame)
        else:
            self.transport.write(frame)

    def uncork(self) -> None:
        kept, self._kept = self._kept, []
        if kept and self.transport is not None and not self.transport.is_closing():
            self.transport.write(kept[0] if len(kept) == 1 else b"".join(kept))

    # -- answers ---------------------------------------------------------------------------------

    def _on_result(self, result: wpb.ExecuteResult) -> None:
        request_id = result.batch_id
        call = self.calls.pop(request_id, None)
        if not self.calls and not self.streams:
            self.idle.set()
        if self.slot:
            self._count()
        if call is None:
            self.releases.add(request_id)
            return
        version = call.version
        stats = self.direct.stats_of(version)
        responses = result.responses[:]
        response = responses[0] if len(responses) == 1 else None
        if response is not None and response.request_id != request_id:
            response = None
        worker_holds = True
        outcome: InferResult | PbdError | None = None
        if response is None:
            outcome = PbdError(Code.INTERNAL, f"{self.name} returned no response")
        elif response.streamed:
            stream_of(call)
            if not call.final:
                self.streams[request_id] = call
                self.idle.clear()
                if self.slot:
                    self._count()
        elif response.rescheduled:
            outcome = PbdError(Code.INTERNAL, NOT_RESCHEDULABLE)
        elif response.rejected:  # its queue in the worker refused it: it never ran
            outcome = rejected(response.error.message)
        elif response.HasField("error"):
            err = response.error
            log_failed_batch(self.errors, self.name, err)
            outcome = PbdError(Code.parse(err.code), err.message)
        else:
            try:
                outputs, worker_holds = self._outputs(response, call.prepared)
            except ValueError as exc:
                outcome = PbdError(Code.INTERNAL, f"{self.name}: {exc}")
            else:
                outcome = self._result(call, outputs, response.parameters_json, request_id,
                                       worker_holds)  # fmt: skip
                worker_holds = False  # released with the result
        if not call.gone:  # as the daemon: a batch whose caller left is not counted
            prepared = [call.prepared]
            size = batch_rows(prepared, version.config.max_batch_size)
            failed = (
                (0, 0)
                if isinstance(outcome, InferResult)
                else failed_share(prepared, [outcome], version.config)
            )
            ns = result.input_ns, result.infer_ns, result.output_ns
            if result.merged:  # one part of a batch the worker formed (pbd_worker.front_batcher)
                stats.executed_part(1, *ns, size, failed, result.batch_rows)
            else:
                stats.executed(1, *ns, size, failed)
        if worker_holds:
            self.releases.add(request_id)
        future = call.future
        if future is None:  # a decoupled model's stream
            if outcome is not None and call.stream is not None:
                _end_stream(call.stream, outcome)
        elif call.stream is not None:
            if not call.gone and not future.done():
                answer = call.stream.first() if call.request.first_answer else call.stream.last()
                task = asyncio.ensure_future(answer)
                task.add_done_callback(lambda done: _settle(future, done))
        elif outcome is not None:
            self._deliver(call, outcome)
        self._drop_hold(call)

    def _on_streamed(self, frame: wpb.StreamedResponse) -> bool:
        """A response of the response sender; it may come before the batch's result (the
        worker sends a default-mode response kept during execute() just ahead of it). True
        when it is the first response of a decoupled model's stream."""
        request_id = frame.request_id
        call = self.streams.get(request_id) or self.calls.get(request_id)
        final = bool(frame.flags & FINAL)

        def result(response: wpb.Response) -> InferResult | None:
            if call is None or call.gone:
                return None
            try:
                outputs, _ = self._outputs(response, call.prepared)
            except ValueError:
                return None  # as the daemon: outputs it cannot map are not handed on
            held = frame.held
            return self._result(call, outputs, response.parameters_json, held, bool(held))

        # A decoupled model's request: the worker paces its responses (pbd_worker.live_requests).
        paced = call if call is not None and call.future is None else None
        if paced is not None and frame.held:
            paced.outstanding += 1
        item = stream_item(frame, result)
        if frame.held and item.result is None:
            self.releases.add(frame.held, paced)
        if call is None:
            return False
        stream = stream_of(call)
        first = False
        if not stream.closed:
            stream.put(item)
            first = call.future is None and not call.answered
            call.answered = True
        elif item.result is not None:
            item.result.release()
        if final and not call.final:
            call.final = True
            self.streams.pop(request_id, None)
            if not self.calls and not self.streams:
                self.idle.set()
            if self.slot:
                self._count()
            self._drop_hold(call)
        return first

    def _outputs(
        self, response: wpb.Response, prepared: PreparedRequest
    ) -> tuple[list[OutputTensor], bool]:
        """The outputs' views, and whether the worker holds blocks for them. Outputs the
        worker wrote into a client's region travel as shape and type only."""
        view, own = self.direct.view, self.direct.own
        targets = prepared.output_targets
        outputs: list[OutputTensor] = []
        worker_holds = False
        for ref in response.outputs[:]:
            if not ref.nbytes or (targets and ref.name in targets):
                data = _EMPTY
            else:
                data = view(ref.region, ref.offset, ref.nbytes)
                if not own(ref.region):
                    worker_holds = True
            outputs.append(OutputTensor(ref.name, ref.datatype, tuple(ref.shape[:]), data))
        return outputs, worker_holds

    def _result(
        self, call: DirectCall, outputs: list[OutputTensor], params: str, held: int, holds: bool
    ) -> InferResult:
        call.holds += 1

        def release() -> None:
            if holds:
                paced = held >> 63 and call.future is None  # a streamed response, counted
                self.releases.add(held, call if paced else None)
            self._drop_hold(call)

        version = call.version
        return InferResult(
            model_name=version.model,
            model_version=version.version,
            id=call.request.id,
            outputs=outputs,
            parameters=json_params(params),
            _release=release,
        )

    def _deliver(self, call: DirectCall, outcome: InferResult | PbdError) -> None:
        future = call.future
        if future is None:
            if call.stream is not None:
                _end_stream(call.stream, outcome)
            return
        if future.done() or call.gone:
            if isinstance(outcome, InferResult):
                outcome.release()
        elif isinstance(outcome, PbdError):
            future.set_exception(outcome)
        else:
            respond = call.request.respond
            if respond is not None:
                respond(outcome)  # answered in this read, before the caller's task resumes
            future.set_result(outcome)

    def _drop_hold(self, call: DirectCall) -> None:
        call.holds -= 1
        if call.holds == 0:
            self.direct.free(call.blocks)
            if call.prepared.regions:
                self.direct.release_regions(call.prepared)
        if self.retired and not self.calls and not self.streams:
            self.close()


def stream_of(call: DirectCall) -> ResponseStream:
    """The stream of a request answered by its response sender, made at its first sign (its
    result saying so, or a response): its inputs stay lent until the final response."""
    if call.stream is None:
        call.stream = ResponseStream(call.request.on_response)
        call.holds += 1
        if call.gone:
            call.stream.close()
    return call.stream


def _end_stream(stream: ResponseStream, outcome: InferResult | PbdError) -> None:
    """A decoupled request answered in its result instead of by its response sender (an
    error: execute() raised, a bad descriptor): the stream's last item."""
    if isinstance(outcome, PbdError):
        stream.fail(outcome)
    else:
        stream.put(StreamResult(result=outcome, final=True))


def _settle(future: asyncio.Future[InferResult], done: asyncio.Future[Any]) -> None:
    """The answer of a request answered by its response sender, as its stream picked it."""
    if future.done():
        if not done.cancelled() and isinstance(done.result(), InferResult):
            done.result().release()
        return
    if done.cancelled():
        future.cancel()
        return
    answer = done.result()
    if isinstance(answer, PbdError):
        future.set_exception(answer)
    else:
        future.set_result(answer)


class DirectStream:
    """A decoupled model's request on the direct path: its responses, as its worker sends
    them; leaving before the final one cancels the request."""

    def __init__(
        self, direct: Owner, call: DirectCall, link: DirectLink, request_id: int, nbytes: int,
        began: int,
    ) -> None:  # fmt: skip
        assert call.stream is not None
        self.direct, self.call, self.link = direct, call, link
        self.request_id, self.nbytes, self.began = request_id, nbytes, began
        self.stream = call.stream

    async def __aiter__(self) -> AsyncIterator[StreamResult]:
        try:
            async for item in self.stream:
                yield item
        finally:
            if not self.stream.finished:
                self.link.cancel(self.request_id)
            self.stream.close()
            self.direct.held -= self.nbytes
            stats = self.direct.stats_of(self.call.version)
            took = time.perf_counter_ns() - self.began
            error = self.stream.error
            if error is not None:
                stats.failed(took, failure_reason(error))
            elif self.stream.finished:
                stats.success.add(took)
