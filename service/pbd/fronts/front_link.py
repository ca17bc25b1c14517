"""The daemon's end of one front end's socket (``pbd serve --frontends N``).

An ``asyncio.Protocol``, as the worker links are: the frames of each read are decoded and
handled there, with no task per message. An ``Infer`` runs through the daemon's dataplane as a
request of the daemon's own edges does (``run_traced`` over ``DataPlane.infer`` or
``infer_stream``), started at once in the read that brought it, so its Execute is on the way to
the worker before that read returns (``pbd.grpc.eager``). Its answer is a descriptor of where
the outputs lie; the daemon keeps them (``hold``) until the front end says it has encoded them.
A ``Call`` runs one of the daemon's own gRPC methods, restrictions and all.

What the front end lent (its arena blocks holding a request's inputs) is given back with
``InputsFree`` once no worker reads them: the request is over and every batch that described
them has been freed (``pbd.types.LentInputs``). Frames the daemon owes the front end ride
ahead of the next one it sends; at most one loop turn later they go alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from pbd._proto import front_pb2 as fpb
from pbd.answer import answer_request
from pbd.dataplane import DataPlane
from pbd.errors import Code, PbdError
from pbd.fronts import wire
from pbd.grpc import eager
from pbd.grpc.calls import Method
from pbd.grpc.protocol import Abort
from pbd.grpc.status import finishing as grpc_finishing
from pbd.http.status import finishing as http_finishing
from pbd.memory import lent
from pbd.memory.client_shm import SystemRegion
from pbd.peercred import peer_allowed
from pbd.types import InferRequest, InferResult, LentInputs
from pbd_wire.framing import FrameError, FrameSplitter, encode_frame
from pbd_wire.shm import SegmentMap

if TYPE_CHECKING:
    from pbd.tracing.request import RequestTrace

log = logging.getLogger("pbd.fronts")
HELLO_TIMEOUT_S = 10.0


class FrontHub:
    """What every front end's link shares: set up by ``pbd.fronts.supervisor.Fronts``."""

    def __init__(
        self,
        dataplane: DataPlane,
        methods: dict[bytes, Method],
        shm_dir: str,
        tokens: dict[int, tuple[str, str]],
    ) -> None:
        self.dataplane = dataplane
        self.methods = methods
        self.shm_dir = shm_dir
        # index -> (token, arena name base) of the front end started under that index.
        self.tokens = tokens
        self.links: dict[int, FrontLink] = {}
        self.decoupled: list[str] = []
        self.stopping = False  # shutting down: the front ends keep serving until their Stop
        # The direct path's table (``pbd.fronts.routes``): recomputed for every Models frame.
        self.direct: Callable[[], list[fpb.DirectVersion]] = list
        # A front end's direct-path statistics (``StatsReport``, with its index), to add to
        # the daemon's.
        self.on_stats: Callable[[int, fpb.StatsReport], None] = lambda index, report: None
        self._barriers = itertools.count(1)
        self._waiting: dict[int, tuple[set[int], asyncio.Future[None]]] = {}
        self.on_attach: Callable[[FrontLink], None] = lambda link: None
        self.shm = dataplane.shm  # the client's regions, which front ends follow

    def attach(self, link: FrontLink) -> None:
        old = self.links.get(link.index)
        self.links[link.index] = link
        if old is not None and old is not link:
            old.close()
        link.send(self._models_frame(0))
        everything = [r for r in self.shm.system_regions() if not r.awaiting_unregister]
        link.send(_regions_frame(fpb.Regions(all=True, added=_described(everything))))
        self.on_attach(link)

    def lost(self, link: FrontLink) -> None:
        if self.links.get(link.index) is link:
            del self.links[link.index]
        for barrier in list(self._waiting):
            self.synced(link.index, barrier)

    async def sync(self, decoupled: list[str] | None = None, timeout: float = 10.0) -> bool:
        """Tell every front end the model table (the decoupled models, when given, and the
        direct path's), and return once each has it: for a table that takes an instance off
        the direct path, once nothing a front end sent there is unanswered."""
        if decoupled is not None:
            self.decoupled = decoupled
        return await self._ask(self._models_frame, timeout, "confirm the model table")

    async def sync_regions(
        self, added: list[SystemRegion], removed: list[str], timeout: float = 10.0
    ) -> bool:
        """Tell every front end the regions registered (``added``) and unregistered
        (``removed``), and return once each applied it (a region registered is usable
        through any front end once its registration is answered; one unregistered, through
        none)."""
        change = fpb.Regions(added=_described(added), removed=removed)

        def frame(barrier: int) -> bytes:
            change.barrier = barrier
            return _regions_frame(change)

        return await self._ask(frame, timeout, "confirm the shared-memory regions")

    async def regions_let_go(self, timeout: float = 60.0) -> bool:
        """Return once no front end's request in flight holds a region the last table left
        out (False after ``timeout``: the daemon then frees the names anyway; a worker keeps
        its mapping of a registration for as long as a request uses it)."""

        def frame(barrier: int) -> bytes:
            let_go = fpb.DaemonToFront(regions_let_go=fpb.RegionsLetGo(barrier=barrier))
            return encode_frame(let_go.SerializeToString())

        return await self._ask(frame, timeout, "let go of unregistered shared-memory regions")

    def announce(self) -> None:
        """Tell every front end the model table, waiting for no one."""
        self.broadcast(self._models_frame(0))

    async def collect_stats(self, timeout: float = 5.0) -> None:
        """Every front end's direct-path statistics, added to the daemon's before this
        returns (``on_stats``)."""

        def frame(ask: int) -> bytes:
            message = fpb.DaemonToFront(stats_ask=fpb.StatsAsk(ask=ask))
            return encode_frame(message.SerializeToString())

        await self._ask(frame, timeout, "report their statistics")

    async def _ask(self, frame: Callable[[int], bytes], timeout: float, what: str) -> bool:
        """Send every front end ``frame(n)`` and wait until each answered ``n`` (``synced``):
        True, or False once ``timeout`` passed."""
        if not self.links:
            return True
        barrier = next(self._barriers)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[barrier] = (set(self.links), future)
        data = frame(barrier)
        for link in list(self.links.values()):
            link.send(data)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            log.warning("front ends did not %s within %gs", what, timeout)
            return False
        finally:
            self._waiting.pop(barrier, None)
        return True

    def _models_frame(self, barrier: int) -> bytes:
        models = fpb.Models(
            decoupled=self.decoupled,
            barrier=barrier,
            direct=self.direct(),
            stopping=self.stopping,
        )
        return encode_frame(fpb.DaemonToFront(models=models).SerializeToString())

    def synced(self, index: int, barrier: int) -> None:
        waiting = self._waiting.get(barrier)
        if waiting is None:
            return
        indexes, future = waiting
        indexes.discard(index)
        if not indexes and not future.done():
            future.set_result(None)

    def broadcast(self, frame: bytes) -> None:
        for link in list(self.links.values()):
            link.send(frame)


def _described(regions: list[SystemRegion]) -> list[fpb.SystemRegion]:
    return [
        fpb.SystemRegion(
            name=r.name, worker_name=r.worker_name, offset=r.offset, byte_size=r.byte_size
        )
        for r in regions
    ]


def _regions_frame(regions: fpb.Regions) -> bytes:
    return encode_frame(fpb.DaemonToFront(regions=regions).SerializeToString())


class FrontLink(asyncio.Protocol):
    def __init__(self, hub: FrontHub) -> None:
        self.hub = hub
        self.dp = hub.dataplane
        self.transport: asyncio.Transport | None = None
        self.index = -1  # known once its Hello is checked
        self.pid = 0
        self.segments: SegmentMap | None = None
        self._base = ""
        self._frames = FrameSplitter()
        self._tasks: dict[int, asyncio.Task[None]] = {}  # inference requests running
        self._calls: dict[int, asyncio.Task[None]] = {}  # other RPCs running
        self._holds: dict[int, Callable[[], None]] = {}
        self._hold_ids = itertools.count(1)
        self._gone: set[int] = set()  # calls the front end gave up on while they ran
        self._freed: list[int] = []  # of those, the ones whose inputs no worker reads now
        self._flush: asyncio.Handle | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._closed = False
        # Liveness, as the supervisor reads it: when the front end last sent anything, and
        # whether it serves its sockets (its first Heartbeat).
        self.last_seen = 0.0
        self.serving = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        if not peer_allowed(transport):
            log.warning("refused a front-end connection: peer uid is neither ours nor root")
            self.close()
            return
        self._hello_timer = self.loop.call_later(HELLO_TIMEOUT_S, self.close)

    def data_received(self, data: bytes) -> None:
        self.last_seen = self.loop.time()
        try:
            for frame in self._frames.split(data):
                self._on(fpb.FrontToDaemon.FromString(frame))  # type: ignore[arg-type]
                if self._closed:
                    return
        except (FrameError, ValueError) as exc:  # ValueError: protobuf's DecodeError
            log.warning("front end %d sent an undecodable frame (%s); closing", self.index, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    # -- messages -----------------------------------------------------------------------------

    def _on(self, message: fpb.FrontToDaemon) -> None:
        kind = message.WhichOneof("kind")
        if self.index < 0 and kind != "hello":
            raise ValueError("first message is not Hello")
        if kind == "infer":
            self._infer(message.infer)
        elif kind == "release":
            self._release(message.release.holds)
        elif kind == "cancel":
            for call in message.cancel.calls:
                task = self._tasks.get(call)
                if task is not None:
                    self._gone.add(call)
                    task.cancel()
                elif (control := self._calls.get(call)) is not None:
                    control.cancel()
        elif kind == "call":
            self._call(message.call)
        elif kind == "synced":
            self.hub.synced(self.index, message.synced.barrier)
        elif kind == "stats":
            self.hub.on_stats(self.index, message.stats)
            self.hub.synced(self.index, message.stats.ask)
        elif kind == "hello":
            self._hello(message.hello)
        elif kind == "heartbeat":
            self.serving = True

    def _hello(self, hello: fpb.Hello) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        expected = self.hub.tokens.get(hello.index)
        if (
            self.index >= 0
            or expected is None
            or not expected[0]
            or not hmac.compare_digest(expected[0], hello.token)
        ):
            log.warning("refused a front-end connection: bad token for index %d", hello.index)
            self.close()
            return
        # Used once: a second connection presenting it is refused.
        self.hub.tokens[hello.index] = ("", expected[1])
        self.index, self.pid, self._base = hello.index, hello.pid, expected[1]
        self.segments = lent.lend(self._base, self.hub.shm_dir)
        self.hub.attach(self)

    def _release(self, holds: Iterator[int] | Any) -> None:
        for hold in holds:
            release = self._holds.pop(hold, None)
            if release is not None:
                release()

    # -- inference ------------------------------------------------------------------------------

    def _infer(self, infer: fpb.Infer) -> None:
        if infer.release:
            self._release(infer.release)
        call = infer.call
        assert self.segments is not None
        try:
            request = wire.request_from_infer(infer, self.segments.view)
        except PbdError as exc:
            self._answer_error(call, exc)
            return
        except (ValueError, TypeError) as exc:
            self._answer_error(call, PbdError(Code.INVALID_ARG, f"malformed request: {exc}"))
            return
        request.lent = LentInputs(functools.partial(self._inputs_free, call))
        # Run it now, up to where it first waits (pbd.grpc.eager).
        task = eager.start(
            self.loop, self._serve(call, request, wire.trace_ask(infer), infer.stream)
        )
        if task is not None:
            self._tasks[call] = task

    async def _serve(
        self, call: int, request: InferRequest, ask: wire.TraceAsk, stream: bool
    ) -> None:
        """One request, to its final answer. That answer also tells the front end that no
        worker reads the request's inputs any more (``inputs_free``); a request the front end
        gave up on gets ``InputsFree`` instead, once that is so (``_inputs_free``)."""
        try:
            trace = self.dp.start_trace(
                request, ask.method, ask.start_ns, lambda: ask.traceparent or None, ask.system
            )
            if stream:
                await self._stream(call, request, trace, ask.system)
            else:
                encode = functools.partial(self._encode, call)
                finishing = _finishing(ask.system)
                frame = await answer_request(
                    request, trace, self.dp.infer, encode, finishing, self.send
                )
                if frame is not None:
                    self.send(frame)
        except PbdError as exc:
            self._answer_error(call, exc)
        except asyncio.CancelledError:
            pass  # the front end gave up on it: nobody to answer
        except Exception as exc:  # noqa: BLE001 - one request's bug must not end the link
            log.exception("serving front end %d's request failed", self.index)
            self._answer_error(call, PbdError(Code.INTERNAL, f"Unexpected {type(exc)}: {exc}"))
        finally:
            self._tasks.pop(call, None)
            assert request.lent is not None
            request.lent.end()

    async def _stream(
        self, call: int, request: InferRequest, trace: RequestTrace | None, system: str
    ) -> None:
        if trace is None:
            await self._responses(call, request, None)
            return
        request.trace = trace
        with _finishing(system)(trace):
            await self._responses(call, request, trace)

    async def _responses(
        self, call: int, request: InferRequest, trace: RequestTrace | None
    ) -> None:
        async for item in self.dp.infer_stream(request):
            replying = time.time_ns()
            if item.result is not None:
                self.send(self._encode(call, item.result, final=item.final))
                if trace is not None:
                    trace.responded(replying)
            else:
                frame = wire.answer_frame(
                    call, None, error=item.error, final=item.final, inputs_free=item.final
                )
                self.send(frame)

    def _encode(self, call: int, result: InferResult, final: bool = True) -> bytes:
        """The Answer of ``result``; its memory is kept until the front end releases it."""
        release = result.take_release()
        hold = 0
        if release is not None:
            hold = next(self._hold_ids)
            self._holds[hold] = release
        return wire.answer_frame(call, result, final=final, hold=hold, inputs_free=final)

    def _answer_error(self, call: int, error: PbdError) -> None:
        self.send(wire.answer_frame(call, None, error=error, inputs_free=True))

    def _inputs_free(self, call: int) -> None:
        """No worker reads ``call``'s inputs any more: news only for a call the front end gave
        up on (every other one said so with its final answer)."""
        if call not in self._gone:
            return
        self._gone.discard(call)
        self._freed.append(call)
        if self._flush is None and not self._closed:
            self._flush = self.loop.call_soon(self._send_freed)

    def _send_freed(self) -> None:
        self._flush = None
        if self._freed:
            self.send(b"")

    # -- calls: the other RPCs ------------------------------------------------------------------

    def _call(self, message: fpb.Call) -> None:
        method = self.hub.methods.get(message.path.encode())
        if method is None or method.streaming:
            self._reply(message.call, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        self._calls[message.call] = self.loop.create_task(self._run_call(message, method))

    async def _run_call(self, message: fpb.Call, method: Method) -> None:
        context = LinkContext(tuple(_metadata(message.metadata)))
        try:
            response = await method.handler(method.deserialize(message.body), context)
            body = method.serialize(response)
        except Abort as exc:
            self._reply(message.call, exc.code, exc.details)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - as pbd.grpc.calls answers an unexpected error
            log.error("unexpected error in a gRPC handler", exc_info=exc)
            self._reply(message.call, grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
        else:
            reply = fpb.CallReply(call=message.call, body=body)
            self.send(encode_frame(fpb.DaemonToFront(reply=reply).SerializeToString()))
        finally:
            self._calls.pop(message.call, None)

    def _reply(self, call: int, code: grpc.StatusCode, details: str) -> None:
        reply = fpb.CallReply(call=call, code=code.value[0], details=details)
        self.send(encode_frame(fpb.DaemonToFront(reply=reply).SerializeToString()))

    # -- sending and ending ---------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        """Write ``frame`` (empty: only what is owed), preceded by the InputsFree owed."""
        transport = self.transport
        if transport is None or self._closed:
            return
        if self._freed:
            freed = fpb.DaemonToFront(inputs_free=fpb.InputsFree(calls=self._freed))
            self._freed = []
            frame = encode_frame(freed.SerializeToString()) + frame
        if frame:
            transport.write(frame)

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()
        self._end()

    def _end(self) -> None:
        """The front end is gone: what it asked for is cancelled, what it held let go."""
        if self._closed:
            return
        self._closed = True
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        for task in [*self._tasks.values(), *self._calls.values()]:
            task.cancel()
        self._tasks.clear()
        self._calls.clear()
        holds, self._holds = self._holds, {}
        for release in holds.values():
            release()
        if self.index >= 0:
            self.hub.lost(self)


class LinkContext:
    """The context a method run for a front end sees: its client's metadata."""

    __slots__ = ("_metadata",)

    def __init__(self, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise Abort(code, details)

    def answer(self, body: bytes) -> None:
        raise RuntimeError("a passed-on call answers when its handler returns")


def _metadata(items: Any) -> Iterator[tuple[str, str | bytes]]:
    for item in items:
        key = item.key
        yield (key, item.value if key.endswith("-bin") else item.value.decode("latin-1"))


def _finishing(system: str) -> Callable[[RequestTrace], AbstractContextManager[None]]:
    return http_finishing if system == "http" else grpc_finishing
