"""The direct path, from a front end's side: requests of the versions the daemon lists
(``Models.direct``, ``pbd.fronts.routes``) go straight to a worker, over a link of this front
end's own (``worker.proto``, "The direct path"); the daemon is not in the request's way.

A request's run here is the daemon's for Triton's default scheduler, step for step, with the
same code where it can be: validated against the version's configuration (``prepare_request``),
described for the worker (``describe_request``: its inputs already lie in this front end's
arena, so nothing is copied), sent to the instance with the fewest of this front end's requests
in flight, answered from the worker's ``ExecuteResult`` (or, for a model that answers through
its response sender, from its ``StreamedResponse`` frames, as ``ResponseStream`` picks them),
and counted in the version's statistics as the daemon counts them, to be reported when the
daemon asks (``StatsReport``).

Each instance is reached over a link of this front end's own (``pbd.fronts.direct_link``:
the link, ids, what a request holds, a link's end). A link that closes fails what it carries;
the version's other instances (or the daemon, once the table names none here) take the next
requests. An instance leaving the table is sent nothing more, and the table's barrier is
answered once nothing sent there is unanswered (``retired``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable

from pbd._proto import front_pb2 as fpb
from pbd.errors import Code, PbdError
from pbd.fronts.direct_link import (
    DirectCall,
    DirectLink,
    DirectStream,
    DirectVersion,
    Free,
    Own,
    View,
    stream_of,
)
from pbd.fronts.inflight import InflightTable
from pbd.memory.client_shm import ClientShmRegistry, Region, SystemRegion
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import model_config_from_json
from pbd.stats import ModelStats, failure_reason
from pbd.types import (
    InferRequest,
    InferResult,
    ParamValue,
    PreparedRequest,
)
from pbd.validation import prepare_request, release_regions
from pbd_wire import front_base
from pbd_wire.client_region import RegionIdentity
from pbd_wire.shm import Block

log = logging.getLogger("pbd.fronts")
REASONS_KEPT = 64
SHM_PARAMS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")

# Copies a request's inputs into the arena, setting each one's ``placed``; its blocks.
Place = Callable[[InferRequest], list[Block]]


def _region_known(parameters: dict[str, ParamValue], regions: dict[str, Region]) -> bool:
    """Whether the tensor's ``shared_memory_region`` is a system region this front end
    knows (any other goes through the daemon, which answers what it is)."""
    region = parameters.get("shared_memory_region")
    return isinstance(region, str) and region in regions


class Direct:
    """The direct path of one front end: the table, the links, the statistics."""

    def __init__(
        self, index: int, shm_dir: str, view: View, own: Own, free: Free, budget_bytes: int = 0
    ) -> None:
        self.index = index
        # Input bytes of direct requests it may hold (0: any); a request past it goes
        # through the daemon, whose --max-queued-bytes budget then decides.
        self.budget = budget_bytes
        self.held = 0
        # Where links of scaled instances publish their counts (``pbd.fronts.inflight``).
        self.inflight: InflightTable | None = None
        self.shm_dir = shm_dir
        self.view = view
        self.own = own
        self.free = free
        self.versions: dict[tuple[str, str], DirectVersion] = {}
        self.links: dict[str, DirectLink] = {}  # by socket
        self.stats: dict[tuple[str, str], ModelStats] = {}
        # Triton's first-response histogram is kept (--metrics-config histogram_latencies).
        self.first_response_histogram = False
        self._ids = itertools.count(front_base(index) + 1)
        self._configs: dict[str, ModelConfig] = {}  # by config JSON: parsed once
        self._connecting: set[asyncio.Future[None]] = set()  # the loop keeps weak references
        # Why workers went, by socket, as the daemon said (``InstanceGone``), the latest kept.
        self.reasons: dict[str, str] = {}
        self._lost: dict[str, DirectLink] = {}  # links that ended, waiting for those words
        self._retired: set[DirectLink] = set()  # out of the table, requests still out
        self._loop: asyncio.AbstractEventLoop | None = None
        # The client's system regions as the daemon last told them (``Regions``): a request
        # whose tensors are in them is described for the worker here, checked as the daemon
        # checks it; one naming another region (a CUDA one, an unknown name) goes through the
        # daemon, which answers it.
        self.shm = ClientShmRegistry(enabled=True, key_prefixes=[], shm_dir=shm_dir)
        self._left_out: list[Region] = []  # out of the table, held by requests in flight
        self._let_go = asyncio.Event()  # set while none of those is held
        self._let_go.set()

    # -- the table -------------------------------------------------------------------------------

    def update(self, table: list[fpb.DirectVersion]) -> list[DirectLink]:
        """Apply a new table; the links it no longer names (retired: they finish what they
        carry, take nothing new)."""
        versions: dict[tuple[str, str], DirectVersion] = {}
        named: set[str] = set()
        configs: dict[str, ModelConfig] = {}
        for item in table:
            config = self._config(item, configs)
            if config is None:
                continue
            key = (item.model, item.version)
            version = DirectVersion(item.model, item.version, config, list(item.directories))
            for spec in item.instances:
                named.add(spec.socket)
                link = self.links.get(spec.socket)
                if link is None or link.closed:
                    link = self.links[spec.socket] = DirectLink(self, spec)
                    connecting = asyncio.ensure_future(link.connect())
                    self._connecting.add(connecting)
                    connecting.add_done_callback(self._connecting.discard)
                version.links.append(link)
            versions[key] = version
            if item.latest:
                versions[(item.model, "")] = version
        self.versions = versions
        self._configs = configs
        retired = []
        for socket_name, link in list(self.links.items()):
            if socket_name not in named:
                del self.links[socket_name]
                link.retired = True
                link.usable = False
                retired.append(link)
                if not link.calls and not link.streams:
                    link.close()
                else:
                    self._retired.add(link)
        return retired

    def follow_regions(self, change: fpb.Regions) -> None:
        """Apply the daemon's change to its system regions. Requests in flight keep the ones
        they hold (the worker has mapped them by a name unique to their registration); the
        daemon keeps the name of one removed taken until they let go (``regions_let_go``)."""
        old = self.shm.regions
        table: dict[str, Region] = {} if change.all else dict(old)
        for name in change.removed:
            table.pop(name, None)
        for item in change.added:
            identity = RegionIdentity.parse(item.worker_name)
            if identity is not None:  # else not a client's region: not served from here
                table[item.name] = SystemRegion(
                    item.name, "", item.offset, item.byte_size, identity
                )
        self.shm.regions = table
        self._left_out += [r for r in old.values() if r.in_use and table.get(r.name) is not r]
        self._check_let_go()

    def release_regions(self, prepared: PreparedRequest) -> None:
        """A request no longer uses its regions (the worker read its inputs and wrote its
        outputs)."""
        release_regions(prepared, self.shm)
        if self._left_out:
            self._check_let_go()

    async def regions_let_go(self) -> None:
        """Until no request in flight here holds a region the daemon no longer lists."""
        await self._let_go.wait()

    def _check_let_go(self) -> None:
        self._left_out = [r for r in self._left_out if r.in_use]
        if self._left_out:
            self._let_go.clear()
        else:
            self._let_go.set()

    def retired_busy(self) -> list[DirectLink]:
        """The links out of the table that still carry requests (a barrier waits for them)."""
        busy = [link for link in self._retired if link.calls or link.streams]
        self._retired = set(busy)
        return busy

    def _config(
        self, item: fpb.DirectVersion, configs: dict[str, ModelConfig]
    ) -> ModelConfig | None:
        text = item.config_json
        config = self._configs.get(text) or configs.get(text)
        if config is None:
            try:
                config = model_config_from_json(text, model_name=item.model, source="the daemon")
            except (PbdError, ValueError) as exc:
                log.error(
                    "front end %d: the daemon's configuration of %s cannot be read (%s); "
                    "its requests go through the daemon",
                    self.index,
                    item.model,
                    exc,
                )
                return None
        configs[text] = config
        return config

    def clear(self) -> None:
        """The daemon is stopping: every request goes its way from now on (it refuses them)."""
        for link in self.update([]):
            link.retired = True

    def lost(self, link: DirectLink) -> None:
        if self.links.get(link.socket) is link:
            del self.links[link.socket]
        if link.calls or link.streams:
            self._lost[link.socket] = link

    def forget_lost(self, link: DirectLink) -> None:
        """``link``'s requests have failed: no word of the daemon's is waited for any more."""
        if self._lost.get(link.socket) is link:
            del self._lost[link.socket]

    def instance_gone(self, socket_name: str, message: str) -> None:
        """The daemon's words for a worker's end: its requests here fail with them."""
        self.reasons[socket_name] = message
        while len(self.reasons) > REASONS_KEPT:
            del self.reasons[next(iter(self.reasons))]
        link = self._lost.pop(socket_name, None)
        if link is not None:
            link.fail_all(message)

    # -- requests --------------------------------------------------------------------------------

    def route(self, request: InferRequest) -> DirectVersion | None:
        """The version to run ``request`` on directly; None: it goes through the daemon."""
        version = self.versions.get((request.model_name, request.model_version))
        if version is None:
            return None
        regions = self.shm.regions
        for tensor in request.inputs:
            if tensor.data is None and not _region_known(tensor.parameters, regions):
                return None
        for output in request.outputs:
            params = output.parameters
            aimed = params and any(key in params for key in SHM_PARAMS)
            if aimed and not _region_known(params, regions):
                return None
        return version

    def _send(
        self, request: InferRequest, version: DirectVersion, place: Place, streamed: bool
    ) -> tuple[DirectCall, DirectLink, int, int] | None:
        """Validate ``request``, copy its inputs into the arena and send it to one of
        ``version``'s instances: (the call, its link, its id, its input bytes); None when
        it must go through the daemon (no instance connected, or past the budget)."""
        nbytes = sum(len(t.data) for t in request.inputs if t.data is not None)
        if self.budget and self.held + nbytes > self.budget:
            return None
        link = version.pick()
        if link is None:
            return None
        blocks = place(request)
        prepared: PreparedRequest | None = None
        try:
            prepared = prepare_request(request, version.config, self.shm)
            loop = self._loop
            if loop is None:  # kept: get_running_loop() is a getpid() system call on 3.11
                loop = self._loop = asyncio.get_running_loop()
            future: asyncio.Future[InferResult] | None = None
            if not streamed:
                future = loop.create_future()
            call = DirectCall(request, prepared, version, blocks, future)
            if streamed:
                stream_of(call)
            request_id = next(self._ids)
            link.send(request_id, call)
        except (PbdError, ValueError) as exc:
            self.free(blocks)
            if prepared is not None:
                self.release_regions(prepared)
            error = exc if isinstance(exc, PbdError) else PbdError(Code.INVALID_ARG, str(exc))
            error.before_model = True  # refused before any queue: no failure counted
            if error is exc:
                raise
            raise error from None
        self.held += nbytes
        return call, link, request_id, nbytes

    async def infer(
        self, request: InferRequest, version: DirectVersion, place: Place
    ) -> InferResult | None:
        """Run ``request`` on one of ``version``'s instances, its inputs copied into the arena
        by ``place`` (which sets each one's ``placed``); None when no instance is connected
        (the caller sends it through the daemon, as a ModelInfer of a decoupled model: the
        daemon refuses that in its words)."""
        if version.config.decoupled:
            return None
        began = time.perf_counter_ns()
        sent = self._send(request, version, place, streamed=False)
        if sent is None:
            return None
        call, link, request_id, nbytes = sent
        assert call.future is not None
        stats = self.stats_of(version)
        stats.queue.add(time.perf_counter_ns() - began)
        try:
            result = await call.future
        except asyncio.CancelledError:
            link.cancel(request_id)
            raise
        except PbdError as exc:
            took = time.perf_counter_ns() - began
            self.stats_of(version).failed(took, failure_reason(exc))
            self._responded_first(version, took)
            raise
        finally:
            self.held -= nbytes
        took = time.perf_counter_ns() - began
        self.stats_of(version).success.add(took)
        self._responded_first(version, took)
        return result

    def stream(
        self, request: InferRequest, version: DirectVersion, place: Place
    ) -> DirectStream | None:
        """Start a decoupled model's ``request`` on one of ``version``'s instances; its
        responses come as they are sent (``DirectStream``). None: it goes through the
        daemon."""
        began = time.perf_counter_ns()
        sent = self._send(request, version, place, streamed=True)
        if sent is None:
            return None
        call, link, request_id, nbytes = sent
        self.stats_of(version).queue.add(time.perf_counter_ns() - began)
        if self.first_response_histogram and call.stream is not None:
            call.stream.on_first = lambda: self._responded_first(
                version, time.perf_counter_ns() - began
            )
        return DirectStream(self, call, link, request_id, nbytes, began)

    def _responded_first(self, version: DirectVersion, took_ns: int) -> None:
        """A request's first response (outputs or an error) came ``took_ns`` after it was
        taken: Triton's first-response histogram, when it is kept."""
        if self.first_response_histogram:
            self.stats_of(version).responded_first(took_ns, version.config.as_dict)

    async def drained(self, links: list[DirectLink], timeout: float) -> None:
        """Until nothing sent on ``links`` is unanswered (or ``timeout``)."""
        waits = [asyncio.ensure_future(link.idle.wait()) for link in links if not link.closed]
        if waits:
            _done, pending = await asyncio.wait(waits, timeout=timeout)
            for wait in pending:
                wait.cancel()

    # -- statistics ------------------------------------------------------------------------------

    def stats_of(self, version: DirectVersion) -> ModelStats:
        """The counters of ``version`` since the last report."""
        stats = self.stats.get(version.key)
        if stats is None:
            stats = self.stats[version.key] = ModelStats()
        return stats

    def report(self, ask: int) -> fpb.StatsReport:
        """What was counted since the last report (and forget it)."""
        report = fpb.StatsReport(ask=ask)
        stats, self.stats = self.stats, {}
        for (model, version), counted in stats.items():
            record = json.dumps(counted.to_record())
            report.versions.add(model=model, version=version, record=record)
        for socket_name, link in self.links.items():
            inflight = len(link.calls) + len(link.streams)
            if inflight:
                report.loads.add(socket=socket_name, inflight=inflight)
        return report

    def close(self) -> None:
        for link in list(self.links.values()):
            with contextlib.suppress(Exception):
                link.close()
