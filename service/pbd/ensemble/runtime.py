"""An ensemble as a served model version.

It is a :class:`~pbd.version.runtime.VersionRuntime` to everything that lists, looks up or
reports versions (the repository, the dataplane, metrics, the status line), with no instance,
queue or worker of its own: its requests run as requests of its step models
(``pbd.ensemble.runner``). Loading it loads its step models first (Triton does the same, also
in explicit model-control mode), then checks it against their configs; unloading a step model
unloads the ensembles that use it (``depends_on``), as in Triton. It is ready while every
step model is.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from pbd.ensemble.graph import EnsembleGraph
from pbd.ensemble.runner import EnsembleRequest
from pbd.ensemble.validate import validate_steps
from pbd.errors import PbdError, invalid_arg, unavailable
from pbd.modelconfig.ensemble import EnsembleSpec
from pbd.stats import failure_reason
from pbd.types import InferResult, PreparedRequest, request_batch_size
from pbd.version.runtime import VersionRuntime, VersionState

if TYPE_CHECKING:
    from pbd.dataplane import DataPlane
    from pbd.repository.manager import ModelRepository

# The ensembles whose loading is loading this one: an ensemble among its own steps, directly
# or not, would wait for itself.
_LOADING: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "pbd_ensembles_loading", default=()
)


class Ensembles:
    """What ensemble versions share: the repository their step models live in and the
    dataplane their steps' requests go through. The repository makes ensemble versions as it
    loads them, so the daemon builds this after both and before loading any model."""

    def __init__(self, repository: ModelRepository, dataplane: DataPlane) -> None:
        self.repository = repository
        self.dataplane = dataplane


class EnsembleRuntime(VersionRuntime):
    def __init__(self, *, ensembles: Ensembles, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert self.config.ensemble is not None
        self.spec: EnsembleSpec = self.config.ensemble
        self.ensembles = ensembles
        self.graph = EnsembleGraph(self.spec)
        self.inflight = 0
        self.depends_on = self.spec.models

    def _steps(self) -> list[VersionRuntime]:
        repository = self.ensembles.repository
        return [repository.lookup(s.model_name, s.version_text) for s in self.spec.steps]

    @property
    def ready(self) -> bool:
        if not self.serving:
            return False
        try:
            return all(step.ready for step in self._steps())
        except PbdError:
            return False

    async def ready_checked(self) -> bool:
        if not self.ready:
            return False
        answers = await asyncio.gather(*(step.ready_checked() for step in self._steps()))
        return all(answers)

    async def load(self) -> None:
        try:
            await self._load_steps()
            steps = {s.index: r.config for s, r in zip(self.spec.steps, self._steps(), strict=True)}
            try:
                decoupled = validate_steps(self.config, self.spec, steps)
            except ValueError as exc:
                raise invalid_arg(str(exc)) from None
        except PbdError as exc:
            self.state, self.reason = VersionState.UNAVAILABLE, exc.message
            raise
        self.graph = EnsembleGraph(self.spec, decoupled)
        if decoupled:  # Triton makes an ensemble with a decoupled step decoupled
            as_dict = {**self.config.as_dict, "model_transaction_policy": {"decoupled": True}}
            self.config = dataclasses.replace(self.config, decoupled=True, as_dict=as_dict)
        self.state, self.reason = VersionState.READY, ""

    async def _load_steps(self) -> None:
        """Load every step model that has no ready version (Triton's messages when one is
        missing or fails)."""
        repository = self.ensembles.repository
        name = self.config.name
        chain = _LOADING.get()
        if name in chain:
            raise invalid_arg(
                "circular dependency between ensembles: " + " -> ".join([*chain, name])
            )
        token = _LOADING.set((*chain, name))
        try:
            for model in sorted(self.spec.models):
                if repository.ready_versions(model):
                    continue
                if model in chain or model == name:
                    raise invalid_arg(
                        "circular dependency between ensembles: "
                        + " -> ".join([*chain, name, model])
                    )
                if model not in repository.model_names():
                    raise invalid_arg(
                        f"ensemble {name} contains models that are not available or "
                        f"ambiguous: {model}"
                    )
                try:
                    await repository.load(model)
                except PbdError as exc:
                    raise invalid_arg(
                        f"ensemble '{name}' depends on '{model}' which is not valid. Model "
                        f"'{model}' failed with error: {exc.message}"
                    ) from None
        finally:
            _LOADING.reset(token)

    async def infer(self, prepared: PreparedRequest) -> InferResult:
        if self.state is not VersionState.READY:
            raise unavailable(
                f"Request for unknown model: '{self.config.name}' version {self.version} is not "
                "at ready state"
            )
        dataplane = self.ensembles.dataplane
        began = time.perf_counter_ns()
        run = EnsembleRequest(
            dataplane, self.graph, prepared, (self.config.name, str(self.version))
        )
        self.inflight += 1
        try:
            if prepared.stream is None:
                result = await run.single()
            else:  # infer_stream: the answers go into the caller's stream
                await run.stream(prepared.stream)
                result = InferResult(self.config.name, str(self.version), "", [])
        except PbdError as exc:
            self.stats.failed(time.perf_counter_ns() - began, failure_reason(exc))
            raise
        finally:
            self.inflight -= 1
        stats = self.stats
        stats.success.add(time.perf_counter_ns() - began)
        stats.execution_count += 1
        stats.inference_count += request_batch_size(prepared, self.config.max_batch_size)
        stats.last_inference_ms = time.time_ns() // 1_000_000
        return result

    def reject_waiting(self, error: PbdError) -> int:
        return 0  # nothing waits here: the steps' queues hold the waiting requests

    async def unload(self, grace: float, why: str = "") -> None:
        """Take no new requests; let those running finish (up to ``grace``)."""
        if self.state is VersionState.READY:
            self.state = VersionState.UNLOADING
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.inflight and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self.state, self.reason = VersionState.UNAVAILABLE, "unloaded"
