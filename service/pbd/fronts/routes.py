"""The direct path, from the daemon's side: which model versions front ends may send straight to
their workers, and the table that tells them (``Models.direct`` in ``front.proto``).

With front-end processes, a request that goes through the daemon costs the daemon's one thread
about as much as serving the ports itself did: a read and a write each way, the loop's turns,
the request's state (docs/frontends.md). For a version whose scheduling needs nothing that must
be one, a front end can run the request itself: it validates it against the version's
configuration, picks one of the ready instances and sends the Execute to that worker on a link
of its own (``pbd.fronts.direct``); the worker answers on that link. The daemon keeps control:

- **Which versions** (``refusal``): Triton's default scheduler, or dynamic batching whose
  settings a worker honours alone (``pbd_wire.batching.direct_batching``: all but
  ``preserve_ordering``; its batches then form in the worker), decoupled or not, with no
  ``--max-queue-size``, not an ensemble, no response cache, no trace settings that could
  sample the model. An execute() time limit (``--execute-timeout-secs``) holds on the direct
  path too: the worker tells the daemon when its execute() passes it, and the daemon kills it.
  A front end holds at most an eighth of ``--max-queued-bytes`` (shared by the front ends)
  in direct requests; past that, requests go through the daemon, whose budget decides.
  Everything else, and any request naming a client's shared-memory region, goes through the
  daemon as before.
- **Instances scaled with load**: the scaler samples the front ends' requests at each of
  the version's instances from shared memory (``pbd.fronts.inflight``: each instance of a
  scaled version gets a slot in the table, ``load_slot``), with no message; at zero
  instances nothing is in the table and requests go through the daemon, whose queue the
  scaler sees and which starts the first instance (a cold start).
- **Which instances**: the ready ones (warmed up, not draining). Each instance's worker gets a
  socket and a token for front ends when it starts (``socket_for``); a table naming it goes
  out once it is ready (``changed``), and before it stops it is taken out of the table behind
  a barrier (``withdraw``): the front ends answer only once nothing they sent there is still
  unanswered, so an unload or a scale-down cuts no request.
- **Statistics**: front ends count what they ran as the daemon would, and report it when the
  daemon asks, before ModelStatistics and ``/metrics`` answer (``collect_stats``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
from typing import TYPE_CHECKING

from pbd._proto import front_pb2 as fpb
from pbd.fronts.inflight import InflightTable, Slots
from pbd.instance.records import State
from pbd.settings import Settings
from pbd.tracing.provider import Tracing
from pbd.version.runtime import VersionRuntime, VersionState
from pbd_wire.batching import direct_batching
from pbd_wire.framing import encode_frame

if TYPE_CHECKING:
    from pbd.fronts.front_link import FrontHub
    from pbd.instance.instance import Instance
    from pbd.repository.manager import ModelRepository

log = logging.getLogger("pbd.fronts")


def refusal(runtime: VersionRuntime, settings: Settings, tracing: Tracing | None) -> str:
    """Why requests of ``runtime`` must go through the daemon; "" when they need not."""
    config = runtime.config
    features = config.as_dict
    # Dynamic batches of direct requests form in the worker (pbd_worker.front_batcher), for the
    # settings a worker can honour alone.
    _policy, batching_refusal = direct_batching(features)
    checks = (
        (not settings.frontend_direct, "--frontend-direct is off"),
        (config.ensemble is not None, "an ensemble"),
        (bool(batching_refusal), batching_refusal),
        ("sequence_batching" in features, "sequence batching"),
        (settings.max_queue_size > 0, "--max-queue-size"),
        (config.response_cache and settings.cache_local_size_bytes > 0, "the response cache"),
        (tracing is not None and may_trace(tracing, config.name), "traced"),
    )
    return next((why for hit, why in checks if hit), "")


def may_trace(tracing: Tracing, model: str) -> bool:
    """Whether the trace settings could sample a request of ``model``."""
    if tracing.processor is None:
        return False
    setting = tracing.settings.setting(model)
    return bool(setting.level) and setting.rate != 0 and setting.count != 0


class Routes:
    """``pbd.instance.instance.DirectRoutes`` for the daemon's instances, and the table's
    source for ``FrontHub``."""

    def __init__(self, daemon_id: str, settings: Settings, tracing: Tracing | None) -> None:
        self.settings = settings
        self.tracing = tracing
        self.repository: ModelRepository | None = None  # set with the hub (``attach``)
        self.hub: FrontHub | None = None
        self._prefix = f"@pbd-{daemon_id}-direct-"
        self._sockets = itertools.count(1)
        self._withdrawn: set[int] = set()  # id() of instances on their way out
        # What each front end had in flight per worker socket at its last report.
        self._loads: dict[int, dict[str, int]] = {}
        self.slots: Slots | None = None  # scaled instances' slots (pbd.fronts.inflight)
        self._announcing: asyncio.Handle | None = None
        self._draining = False  # shutting down: nothing is served directly any more

    def attach(
        self, hub: FrontHub, repository: ModelRepository, inflight: InflightTable | None = None
    ) -> None:
        self.hub, self.repository = hub, repository
        self.slots = Slots(inflight) if inflight is not None else None
        hub.direct = self.table
        hub.on_stats = self.add_stats

    # -- DirectRoutes --------------------------------------------------------------------------

    def socket_for(self, instance: Instance) -> tuple[str, str]:
        self._withdrawn.discard(id(instance))
        return f"{self._prefix}{next(self._sockets)}", secrets.token_hex(16)

    def changed(self) -> None:
        """Announce the table once, at the end of this loop turn (several changes, one
        table)."""
        if self.hub is None or self._announcing is not None:
            return
        self._announcing = asyncio.get_running_loop().call_soon(self._announce)

    def _announce(self) -> None:
        self._announcing = None
        if self.hub is not None:
            self.hub.announce()

    async def withdraw(self, instance: Instance, timeout: float) -> bool:
        self._withdrawn.add(id(instance))
        socket_name = instance.front[0]
        if self.hub is None or not socket_name:
            return True
        if timeout <= 0:  # no time to wait: what the front ends last said they had there
            self.hub.announce()
            return not any(loads.get(socket_name) for loads in self._loads.values())
        return await self.hub.sync(timeout=timeout)

    async def drain(self, timeout: float) -> bool:
        """Shutdown: front ends send nothing more directly; True once what they sent is
        answered (False after ``timeout``: the instances' stop then fails it)."""
        self._draining = True
        if self.hub is None:
            return True
        if await self.hub.sync(timeout=timeout):
            return True
        await self.collect_stats()  # which workers still have requests (``withdraw``)
        return False

    def inflight_at(self, instance: Instance) -> int:
        """Requests the front ends sent straight to ``instance`` and have not had answered,
        as they last wrote them (only for an instance of a scaled version: 0 otherwise)."""
        return self.slots.count(id(instance)) if self.slots is not None else 0

    def gone(self, instance: Instance, message: str) -> None:
        if self.slots is not None:
            self.slots.release(id(instance))  # its front ends' requests there failed
        if self.hub is None or not instance.front[0]:
            return
        gone = fpb.InstanceGone(socket=instance.front[0], message=message)
        self.hub.broadcast(encode_frame(fpb.DaemonToFront(instance_gone=gone).SerializeToString()))

    # -- the table ---------------------------------------------------------------------------

    def table(self) -> list[fpb.DirectVersion]:
        """Every version front ends may serve directly, with its ready instances."""
        if self.repository is None or self._draining:
            return []
        out: list[fpb.DirectVersion] = []
        for name, entry in self.repository.entries.items():
            latest = max((v for v, r in entry.versions.items() if r.serving), default=None)
            for number, runtime in entry.versions.items():
                if not isinstance(runtime, VersionRuntime):
                    continue
                if runtime.state is not VersionState.READY:
                    continue
                if refusal(runtime, self.settings, self.tracing):
                    continue
                scaled = runtime.policy.enabled and self.slots is not None
                instances = [
                    fpb.DirectInstance(
                        name=i.describe(),
                        socket=i.front[0],
                        token=i.front[1],
                        cancel_region=i.memory.cancel.name,
                        load_slot=self._slot(i) if scaled else 0,
                    )
                    for i in runtime.instances()
                    if i.state is State.READY
                    and i.front[0]
                    and not i.draining
                    and not i.warming
                    and id(i) not in self._withdrawn
                ]
                if not instances:
                    continue
                out.append(
                    fpb.DirectVersion(
                        model=name,
                        version=str(number),
                        latest=number == latest,
                        config_json=runtime.config.to_json(),
                        instances=instances,
                        directories=[str(path) for path in runtime.directories],
                    )
                )
        return out

    def _slot(self, instance: Instance) -> int:
        assert self.slots is not None
        return self.slots.slot_of(id(instance))

    # -- statistics ----------------------------------------------------------------------------

    def add_stats(self, index: int, report: fpb.StatsReport) -> None:
        """A front end's direct-path counters, added to the versions' own, and what it has in
        flight now."""
        self._loads[index] = {load.socket: load.inflight for load in report.loads}
        if self.repository is None:
            return
        for item in report.versions:
            entry = self.repository.entries.get(item.model)
            runtime = entry.versions.get(int(item.version)) if entry is not None else None
            if runtime is None:
                continue  # unloaded meanwhile: its statistics went with it
            try:
                runtime.stats.merge_record(json.loads(item.record))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("a front end reported unreadable statistics (%s)", exc)

    async def collect_stats(self) -> None:
        if self.hub is not None:
            self._loads.clear()  # a front end gone since reports nothing
            await self.hub.collect_stats()

    def inflight(self) -> int:
        """Requests the front ends sent straight to workers and did not have answered yet, at
        their last reports."""
        return sum(sum(loads.values()) for loads in self._loads.values())

    def pending(self, runtime: VersionRuntime) -> int:
        """Of ``runtime``'s requests the front ends sent straight to workers, those waiting in
        a worker behind its pipeline (``--worker-pipeline-depth``), as the daemon's queue
        counts its own: each instance takes that many batches at once."""
        if not self._loads:
            return 0
        depth = runtime.dispatch.depth
        waiting = 0
        for instance in runtime.instances():
            socket_name = instance.front[0]
            sent = sum(loads.get(socket_name, 0) for loads in self._loads.values())
            if sent:
                waiting += max(sent + instance.batches.inflight - depth, 0)
        return waiting
