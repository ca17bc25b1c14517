"""What every RPC does, independent of the transport.

The servicer converts a message into pbd types, calls one method here, and converts back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pbd import __version__
from pbd.admission import ByteBudget
from pbd.cache.response_cache import ResponseCache
from pbd.errors import Code, PbdError, invalid_arg, unavailable
from pbd.logsettings import GRPC, Wording, log_settings_answer, update_log_settings
from pbd.memory.client_shm import ClientShmRegistry, CudaRegion, SystemRegion
from pbd.modelconfig.model import ModelConfig
from pbd.repository.manager import ModelRepository, parse_version
from pbd.responses import ResponseStream, StreamResult
from pbd.settings import Settings
from pbd.stats import ModelStats
from pbd.tracing.provider import Tracing
from pbd.tracing.request import RequestTrace
from pbd.tracing.settings import TraceSettings
from pbd.types import FILE_PREFIX, IndexEntry, InferRequest, InferResult, PreparedRequest
from pbd.validation import prepare_request, release_regions

if TYPE_CHECKING:
    from pbd.instance.instance import Instance
    from pbd.version.runtime import VersionRuntime

# Only what pbd really implements is advertised.
EXTENSIONS = (
    "model_repository",
    "model_configuration",
    "parameters",
    "statistics",
    "system_shared_memory",
    "trace",
    "logging",
)


# How long an unregister waits for the front ends to say no request of theirs holds the
# region (then it answers; the name stays taken until they do, as while requests use it).
LET_GO_WAIT_S = 0.5


class Follower(Protocol):
    """What follows the daemon's state from elsewhere (``pbd.fronts.supervisor.Fronts``: the
    front-end processes)."""

    async def models_changed(self, decoupled: list[str]) -> None:
        """The loaded models changed (``decoupled`` are those of them that are decoupled);
        return once every follower knows."""

    def log_settings_changed(self) -> None: ...

    async def regions_changed(self, added: list[SystemRegion], removed: list[str]) -> None:
        """System regions were registered (``added``) or unregistered (``removed``, by
        name); return once every follower knows."""

    async def regions_let_go(self) -> None:
        """Return once no follower's request in flight holds a region it was told is gone."""

    async def direct_changed(self) -> None:
        """What decides the direct path changed (trace settings); return once every
        follower knows."""

    async def collect_stats(self) -> None:
        """The followers' statistics (the direct path's) are added to the daemon's."""

    def direct_inflight(self) -> int:
        """Requests sent straight to workers, not answered yet (at the last collect)."""

    def direct_pending(self, runtime: VersionRuntime) -> int:
        """Of those, ``runtime``'s that wait in a worker (at the last collect)."""


class DataPlane:
    def __init__(
        self,
        repository: ModelRepository,
        settings: Settings,
        shm: ClientShmRegistry,
        tracing: Tracing | None = None,
        follower: Follower | None = None,
    ) -> None:
        self.repository = repository
        self.settings = settings
        self.shm = shm
        self.tracing = tracing or Tracing(TraceSettings())
        self.accepting = True
        self.started = False  # the startup models have been loaded (or have failed)
        self.inflight = 0
        self.budget = ByteBudget(settings.max_queued_bytes)  # inputs accepted, not answered
        size = settings.cache_local_size_bytes
        self.cache = ResponseCache(size) if size > 0 else None
        self._idle = asyncio.Event()
        self._idle.set()
        # Front-end processes (``pbd serve --frontends``) follow the daemon's state: they hear
        # of model changes before the RPC that made them answers, and of new log flags.
        self.follower = follower
        self._background: set[asyncio.Future[None]] = set()  # the loop keeps weak references

    def all_instances(self) -> list[Instance]:
        """Every instance of every loaded model version."""
        return [
            instance for runtime in self.repository.runtimes() for instance in runtime.instances()
        ]

    # -- server --------------------------------------------------------------------------------

    def server_live(self) -> bool:
        return True

    def server_ready(self) -> bool:
        if not self.accepting or not self.started:
            return False
        return self.repository.all_ready() if self.settings.strict_readiness else True

    def server_metadata(self) -> tuple[str, str, tuple[str, ...]]:
        return self.settings.server_id, __version__, EXTENSIONS

    # -- models --------------------------------------------------------------------------------

    def model_ready(self, name: str, version: str) -> bool:
        try:
            return self.repository.lookup(name, version).ready
        except PbdError as exc:
            if exc.code is Code.INVALID_ARG:
                raise
            return False

    async def model_ready_checked(self, name: str, version: str) -> bool:
        """ModelReady: :meth:`model_ready`, and the instances' ``is_ready()`` hooks agree."""
        if not self.model_ready(name, version):
            return False
        return await self.repository.lookup(name, version).ready_checked()

    def model_metadata(self, name: str, version: str) -> tuple[ModelConfig, list[str]]:
        runtime = self.repository.lookup(name, version)
        versions = [version] if version else [str(v) for v in self.repository.ready_versions(name)]
        return runtime.config, versions

    def model_config(self, name: str, version: str) -> ModelConfig:
        return self.repository.lookup(name, version).config

    def model_directories(self, name: str, version: str) -> list[Path]:
        """Where a version's files lie: its version directory, then the model's."""
        return self.repository.lookup(name, version).directories

    def start_trace(
        self,
        request: InferRequest,
        method: str,
        start_ns: int,
        traceparent: Callable[[], str | None],
        system: str = "grpc",
    ) -> RequestTrace | None:
        """A trace for ``request`` if the trace settings sample it (``traceparent`` is asked
        only then), else None: an untraced request creates no span."""
        if not self.tracing.sample(request.model_name):
            return None
        return RequestTrace(
            self.tracing,
            method=method,
            model=request.model_name,
            version=request.model_version,
            traceparent=traceparent(),
            start_ns=start_ns,
            system=system,
        )

    async def infer(self, request: InferRequest) -> InferResult:
        """One request of a model that is not decoupled: its one result."""
        runtime, prepared, nbytes = self._admit(request, decoupled_ok=False)
        began = time.perf_counter_ns()
        try:
            if self.cache is not None and runtime.config.response_cache:
                result = await self.cache.infer(runtime, prepared)
            else:
                result = await runtime.infer(prepared)
        except asyncio.CancelledError:
            # The client cancelled the RPC: a request already in its worker learns it there.
            if prepared.on_cancel is not None:
                prepared.on_cancel()
            raise
        except PbdError:
            self._responded_first(runtime, began)
            raise
        finally:
            self._leave(prepared, nbytes)
        self._responded_first(runtime, began)
        return result

    async def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamResult, None]:
        """Every response of ``request`` as it comes, the last one ``final`` (a decoupled
        model: 0..n responses, maybe a final flag alone; any other model: one). The caller
        releases each ``item.result``. Errors before the request runs raise PbdError; later
        ones come as an item with ``error``. Leaving early cancels the request."""
        runtime, prepared, nbytes = self._admit(request, decoupled_ok=True)
        began = time.perf_counter_ns()
        stream = ResponseStream(request.on_response)
        if self.settings.metrics_histogram_latencies:
            stream.on_first = lambda: self._responded_first(runtime, began)
        prepared.stream = stream
        task = asyncio.ensure_future(runtime.infer(prepared))
        task.add_done_callback(stream.settle)
        try:
            async for item in stream:
                yield item
        finally:
            if not stream.finished:
                task.cancel()
                if prepared.on_cancel is not None:
                    prepared.on_cancel()
            stream.close()
            self._leave(prepared, nbytes)

    def _responded_first(self, runtime: VersionRuntime, began: int) -> None:
        """Time to first response, for Triton's histogram (kept only when it is served)."""
        if self.settings.metrics_histogram_latencies:
            runtime.stats.responded_first(time.perf_counter_ns() - began, runtime.config.as_dict)

    def decoupled_models(self) -> list[str]:
        """The loaded models whose transaction policy is decoupled."""
        return sorted(
            name
            for name, entry in self.repository.entries.items()
            if any(runtime.config.decoupled for runtime in entry.versions.values())
        )

    async def announce_models(self) -> None:
        """Whatever follows the loaded models (the front ends) hears of them now."""
        if self.follower is not None:
            await self.follower.models_changed(self.decoupled_models())

    def is_decoupled(self, request: InferRequest) -> bool:
        """Whether ``request`` goes to a decoupled model (False when it names no model)."""
        try:
            runtime = self.repository.lookup(request.model_name, request.model_version)
        except PbdError:
            return False
        return runtime.config.decoupled

    def _admit(
        self, request: InferRequest, *, decoupled_ok: bool
    ) -> tuple[VersionRuntime, PreparedRequest, int]:
        """Checks and accounting before a request is queued: (runtime, prepared, bytes); a
        PbdError raised here is marked ``before_model``."""
        try:
            return self._checked(request, decoupled_ok)
        except PbdError as exc:
            exc.before_model = True
            raise

    def _checked(
        self, request: InferRequest, decoupled_ok: bool
    ) -> tuple[VersionRuntime, PreparedRequest, int]:
        if not self.accepting and not request.internal:
            raise unavailable(
                "GRPC server is shutting down and has stopped accepting new requests."
            )
        runtime = self.repository.lookup(request.model_name, request.model_version)
        if runtime.config.decoupled and not decoupled_ok:
            raise PbdError(
                Code.UNSUPPORTED,
                "ModelInfer RPC doesn't support models with decoupled transaction policy",
            )
        # A request refused here never reaches the model: no failure in its statistics
        # (Triton counts none either).
        prepared = prepare_request(request, runtime.config, self.shm)
        nbytes = sum(len(t.data) for t in prepared.inputs if t.data is not None)
        try:
            self.budget.take(request.model_name, nbytes)
        except PbdError:
            release_regions(prepared, self.shm)
            runtime.stats.failed(0, "REJECTED")
            raise
        self.inflight += 1
        self._idle.clear()
        return runtime, prepared, nbytes

    def _leave(self, prepared: PreparedRequest, nbytes: int) -> None:
        # The worker is done with client regions once the result is back: outputs aimed
        # at them are already written there.
        release_regions(prepared, self.shm)
        self.budget.give(prepared.request.model_name, nbytes)
        self.inflight -= 1
        if self.inflight == 0:
            self._idle.set()

    async def drain(self, timeout: float) -> bool:
        """Stop accepting requests; wait (up to ``timeout``) for those in flight. True when
        none is left."""
        self.accepting = False
        if self._idle.is_set():
            return True  # wait_for would time out at once with a timeout of 0, even so
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def model_statistics(self, name: str, version: str) -> list[tuple[str, int, ModelStats]]:
        """(model, version, counters) for ``name`` ("" = every model) and ``version`` ("" =
        every ready version), with Triton's errors for unknown models and versions; what the
        front ends ran directly is added first."""
        await self.collect_stats()
        entries = self.repository.entries
        names = sorted(entries) if not name else [name]
        out: list[tuple[str, int, ModelStats]] = []
        for model in names:
            entry = entries.get(model)
            if entry is None or (name and not entry.versions):
                raise invalid_arg(f"requested model '{model}' is not available")
            runtimes = sorted(entry.versions.items())
            if version:
                runtime = entry.versions.get(parse_version(version))
                if runtime is None or not runtime.serving:
                    raise invalid_arg(
                        f"requested model version is not available for model '{model}'"
                    )
                runtimes = [(runtime.version, runtime)]
            out += [(model, v, r.stats) for v, r in runtimes if r.serving]
        return out

    # -- trace and log extensions ------------------------------------------------------------

    async def trace_setting(
        self, model: str, values: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        """Update (when ``values``) then answer the trace settings of ``model`` ("" = global).
        With front ends, the answer comes once each of them has the table these settings
        make: a model they may trace leaves the direct path before the next request."""
        if model and not self.model_ready(model, ""):
            raise invalid_arg(f"Request for unknown model : {model}")
        if values:
            self.tracing.settings.update(model, values)
            if self.follower is not None:
                await self.follower.direct_changed()
        return self.tracing.settings.answer(model)

    async def collect_stats(self) -> None:
        """Before statistics are read (ModelStatistics, /metrics): the front ends' direct-path
        counters are added to the daemon's."""
        if self.follower is not None:
            await self.follower.collect_stats()

    def requests_inflight(self) -> int:
        """Requests being served now: the daemon's, and those front ends sent straight to
        workers (as of the last ``collect_stats``)."""
        direct = self.follower.direct_inflight() if self.follower is not None else 0
        return self.inflight + direct

    def pending(self, runtime: VersionRuntime) -> int:
        """Requests of ``runtime`` waiting for an instance: in its queue, or sent straight to
        a busy worker by a front end (as of the last ``collect_stats``)."""
        direct = self.follower.direct_pending(runtime) if self.follower is not None else 0
        return len(runtime.queue) + direct

    def log_settings(
        self, values: Mapping[str, tuple[str | None, Any]], wording: Wording = GRPC
    ) -> dict[str, Any]:
        """Update (when ``values``) then answer the log settings; workers follow at once."""
        if values:
            try:
                update_log_settings(self.settings, values, wording)
            finally:  # an error leaves the keys before it applied: the workers follow those too
                for instance in self.all_instances():
                    instance.push_runtime_settings()
                if self.follower is not None:
                    self.follower.log_settings_changed()
        return log_settings_answer(self.settings)

    # -- client shared memory --------------------------------------------------------------------

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register a system region; usable through every front end once this returns."""
        self.shm.register(name, key, offset, byte_size)
        if self.follower is not None:
            region = self.shm.regions[name]
            assert isinstance(region, SystemRegion)
            await self.follower.regions_changed([region], [])

    def shm_status(self, name: str) -> list[SystemRegion]:
        return self.shm.status(name)

    async def shm_unregister(self, name: str) -> None:
        """Unregister system regions (``name``, or all); usable through no front end once
        this returns (requests in flight finish with them)."""
        follower = self.follower
        held = self.shm.unregister(name, held=follower is not None)
        if follower is None or not held:  # none going now: the front ends' lists stand
            return
        await follower.regions_changed([], [region.name for region in held])
        # Their names stay taken until no front end's request holds them.
        letting_go = asyncio.ensure_future(follower.regions_let_go())
        self._background.add(letting_go)
        letting_go.add_done_callback(self._background.discard)
        letting_go.add_done_callback(lambda _done: self._release_held(held))
        # Held by none (nearly always): gone before this answers, as without front ends.
        await asyncio.wait({letting_go}, timeout=LET_GO_WAIT_S)

    def _release_held(self, regions: list[SystemRegion]) -> None:
        for region in regions:
            self.shm.release(region)

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self.shm.register_cuda(name, raw_handle, device_id, byte_size)

    def cuda_shm_status(self, name: str) -> list[CudaRegion]:
        return self.shm.status_cuda(name)

    def cuda_shm_unregister(self, name: str) -> None:
        self.shm.unregister_cuda(name)

    # -- repository ----------------------------------------------------------------------------

    def repository_index(self, repository_name: str, ready_only: bool) -> list[IndexEntry]:
        _check_repository_name(repository_name)
        return self.repository.index(ready_only)

    def _check_explicit(self) -> None:
        if self.settings.model_control_mode != "explicit":
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load_model(
        self, repository_name: str, name: str, params: Mapping[str, tuple[str | None, Any]]
    ) -> None:
        _check_repository_name(repository_name)
        self._check_explicit()
        override: str | None = None
        files: dict[str, bytes] = {}
        for key, (kind, value) in params.items():
            if key == "config":
                if kind != "string_param":
                    raise invalid_arg(
                        f"invalid value type for load parameter '{key}', expected string_param."
                    )
                override = value
            elif key.startswith(FILE_PREFIX):
                if kind != "bytes_param":
                    raise invalid_arg(
                        f"invalid value type for load parameter '{key}', expected bytes_param."
                    )
                if not self.settings.allow_model_upload:
                    raise PbdError(
                        Code.UNSUPPORTED,
                        f"load parameter '{key}': uploading model files is off "
                        "(--allow-model-upload turns it on)",
                    )
                files[key] = value
            else:
                raise invalid_arg(f"unrecognized load parameter '{key}'.")
        if files and override is None:
            raise PbdError(
                Code.INTERNAL,
                f"failed to load '{name}', failed to poll from model repository: "
                "'file:' parameters need a 'config' parameter (the uploaded model's config)",
            )
        # Announced from the load itself: a load the client gave up on still reaches the
        # front ends when it ends.
        await self.repository.load_for_client(name, override, files, then=self.announce_models)

    async def unload_model(
        self, repository_name: str, name: str, params: Mapping[str, tuple[str | None, Any]]
    ) -> None:
        _check_repository_name(repository_name)
        self._check_explicit()
        for key, (kind, _value) in params.items():
            if key == "unload_dependents":
                if kind != "bool_param":
                    raise invalid_arg(
                        f"invalid value type for unload parameter '{key}', expected bool_param."
                    )
            else:
                raise invalid_arg(f"unrecognized unload parameter '{key}'.")
        await self.repository.unload_for_client(name, then=self.announce_models)


def _check_repository_name(name: str) -> None:
    if name:
        raise PbdError(Code.UNSUPPORTED, "'repository_name' specification is not supported")
