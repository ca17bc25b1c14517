"""The model repository at run time: which models and versions are loaded, and their states.

Loading a model reads its config.pbtxt, picks versions by the version policy, and starts a
:class:`~pbd.version.runtime.VersionRuntime` per version. Reloading keeps a version whose
files and config are unchanged; others are replaced new-before-old, so a reload never leaves
the model without a serving version. Lookup errors carry Triton's codes and messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pbd.errors import Code, PbdError, invalid_arg, not_found, status_text, unavailable
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import load_model_config
from pbd.repository.names import check_model_name
from pbd.repository.upload import Uploads
from pbd.types import IndexEntry
from pbd.version.runtime import VersionRuntime, VersionState

log = logging.getLogger("pbd.repository")
RuntimeFactory = Callable[[ModelConfig, int, Path], VersionRuntime]
# (model directory, RepositoryModelLoad's config JSON or None) -> the model's config.
ConfigLoader = Callable[[Path, str | None], Awaitable[ModelConfig]]


async def _read_config(model_dir: Path, override_json: str | None) -> ModelConfig:
    return load_model_config(model_dir, override_json=override_json)


Signature = tuple[tuple[str, int, int], ...]


def model_signature(model_dir: Path) -> Signature:
    """What changes when a model's files change (used to skip reloading unchanged versions)."""
    items: list[tuple[str, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(model_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            items.append((os.path.relpath(path, model_dir), st.st_mtime_ns, st.st_size))
    return tuple(items)


@dataclass
class ModelEntry:
    name: str
    versions: dict[int, VersionRuntime] = field(default_factory=dict)
    # Versions not running, with why: load failures and unloads.
    dead: dict[int, str] = field(default_factory=dict)
    error: str = ""  # the model itself failed to load (config, no versions)
    signature: Signature = ()
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Versions being loaded (replacing, or beside, those in ``versions``): LOADING in the index.
    loading: dict[int, VersionRuntime] = field(default_factory=dict)
    model_dir: Path | None = None  # where ``versions`` were loaded from (an upload's, maybe)


class ModelRepository:
    def __init__(
        self,
        root: Path,
        make_runtime: RuntimeFactory,
        unload_grace: float,
        load_config: ConfigLoader = _read_config,
        uploads: Uploads | None = None,
    ) -> None:
        self.root = root
        self.uploads = uploads
        self.load_config = load_config
        self.make_runtime = make_runtime
        self.unload_grace = unload_grace
        self.entries: dict[str, ModelEntry] = {}
        # Loads clients asked for, going on after the client stopped waiting (Triton's way);
        # shutdown cancels them.
        self._client_loads: set[asyncio.Task[None]] = set()
        self._client_unloads: set[asyncio.Task[None]] = set()  # run to their end at shutdown

    def model_names(self) -> list[str]:
        try:
            return sorted(
                p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
            )
        except OSError:
            return []

    # -- load / unload -------------------------------------------------------------------------

    async def load(
        self,
        name: str,
        override_json: str | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load (or reload) ``name`` from the repository, or from ``files`` (an upload, which
        comes with ``override_json``). A reload that fails leaves the model as it was."""
        try:
            check_model_name(name)
        except PbdError as exc:
            log.error("%s", exc.message)
            raise
        if files:
            if self.uploads is None:
                raise PbdError(Code.UNSUPPORTED, "model upload is not enabled")
            model_dir = await asyncio.to_thread(self.uploads.stage, name, files)
        else:
            model_dir = self.root / name
            if not _is_dir(model_dir):
                error = PbdError(
                    Code.INTERNAL, f"failed to load '{name}', failed to poll from model repository"
                )
                log.error("%s", error.message)
                raise error
        entry = self.entries.setdefault(name, ModelEntry(name))
        async with entry.lock:
            try:
                await self._load_locked(entry, model_dir, override_json)
            finally:
                if self.uploads is not None and entry.model_dir != model_dir:
                    self.uploads.remove(model_dir)  # an upload that did not load

    async def load_for_client(
        self,
        name: str,
        override_json: str | None = None,
        files: Mapping[str, bytes] | None = None,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``load`` for a client's request (RepositoryModelLoad): it goes on when the client
        stops waiting (a deadline, a disconnect), as in Triton, so the model ends loaded or
        failed, never half-way; an unload asked meanwhile waits for it. Shutdown cancels it
        (``unload_all``). ``then`` runs when the load ends, however it ends and whether or
        not the client still waits (the client's answer waits for it)."""
        await self._for_client(
            self.load(name, override_json, files), then, f"load {name}", self._client_loads
        )

    async def unload_for_client(
        self, name: str, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """``unload`` for a client's request (RepositoryModelUnload), which goes on when the
        client stops waiting, as a client's load does: a model is never left half-unloaded
        (its versions out of the table, its instances still running). ``then`` as for
        ``load_for_client``."""
        await self._for_client(self.unload(name), then, f"unload {name}", self._client_unloads)

    async def _for_client(
        self,
        change: Coroutine[Any, Any, None],
        then: Callable[[], Awaitable[None]] | None,
        what: str,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        task = asyncio.create_task(self._then(change, then), name=what)
        tasks.add(task)
        task.add_done_callback(_settled)
        task.add_done_callback(tasks.discard)
        await asyncio.shield(task)

    @staticmethod
    async def _then(
        change: Coroutine[Any, Any, None], then: Callable[[], Awaitable[None]] | None
    ) -> None:
        try:
            await change
        finally:
            task = asyncio.current_task()
            # Not when shutdown cancelled the change: nobody is left to tell.
            if then is not None and not (task is not None and task.cancelling()):
                await then()

    async def _load_locked(self, entry: ModelEntry, model_dir: Path, override: str | None) -> None:
        name = entry.name
        signature = model_signature(model_dir)
        try:
            config = await self.load_config(model_dir, override)
            available = sorted(
                int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()
            )
            wanted = config.version_policy.select(available)
            if not wanted:
                raise invalid_arg(
                    f"at least one version must be available under the version policy of model "
                    f"'{name}' ({model_dir})"
                )
        except PbdError as exc:
            entry.error = exc.message
            log.error("failed to load model '%s': %s", name, exc.message)
            raise PbdError(exc.code, f"failed to load '{name}': {exc.message}") from None
        entry.error = ""
        unchanged = signature == entry.signature and override is None
        keep = {
            v: r
            for v, r in entry.versions.items()
            if v in wanted and unchanged and r.serving and r.config.as_dict == config.as_dict
        }
        fresh = {v: self.make_runtime(config, v, model_dir) for v in wanted if v not in keep}
        began = time.monotonic()
        if fresh:
            log.info("loading model '%s' versions %s", name, sorted(fresh))
        entry.loading = fresh
        try:
            results = await asyncio.gather(
                *(r.load() for r in fresh.values()), return_exceptions=True
            )
        except asyncio.CancelledError:
            # Stopped half-way (shutdown): the versions it was loading are listed with why.
            for version in fresh:
                if version not in entry.versions:
                    entry.dead[version] = "loading was cancelled (the server is shutting down)"
            log.warning(
                "loading model '%s' was cancelled after %.2fs", name, time.monotonic() - began
            )
            raise
        finally:
            entry.loading = {}
        failures = [
            f"version {v} is at UNAVAILABLE state: {_reason(result)};"
            for v, result in zip(fresh, results, strict=True)
            if isinstance(result, BaseException)
        ]
        # Triton's answer to a load that failed: INVALID_ARG, each version's status as text.
        failed = invalid_arg(f"load failed for model '{name}': {''.join(failures)}\n")
        if failures and any(r.serving for r in entry.versions.values()):
            # Triton: "if the reload fails for any reason the already-loaded model will be
            # unchanged and will remain loaded". The new versions that did load go again.
            loaded = [
                r
                for r, result in zip(fresh.values(), results, strict=True)
                if not isinstance(result, BaseException)
            ]
            await asyncio.gather(*(r.unload(0.0) for r in loaded), return_exceptions=True)
            log.error("model '%s' failed to reload; it serves as before: %s", name, failures)
            raise failed
        retired = [r for v, r in entry.versions.items() if v not in keep]
        entry.versions = dict(keep)
        for (version, runtime), result in zip(fresh.items(), results, strict=True):
            if isinstance(result, BaseException):
                entry.dead[version] = _reason(result)
            else:
                entry.versions[version] = runtime
                entry.dead.pop(version, None)
        for version in list(entry.dead):
            if version not in wanted:
                del entry.dead[version]
        entry.signature = signature
        await asyncio.gather(
            *(r.unload(self.unload_grace) for r in retired), return_exceptions=True
        )
        self._serve_from(entry, model_dir if entry.versions else None)
        for runtime in retired:
            if runtime.version not in entry.versions and runtime.version in wanted:
                entry.dead.setdefault(runtime.version, runtime.reason)
        took = time.monotonic() - began
        if failures:
            log.error("model '%s' failed to load in %.2fs: %s", name, took, " ".join(failures))
            raise failed
        log.info("loaded model '%s' versions %s in %.2fs", name, sorted(entry.versions), took)

    async def unload(self, name: str, grace: float | None = None, why: str = "") -> None:
        entry = self.entries.get(name)
        if entry is None:
            return  # Triton: unloading a model that is not loaded succeeds
        grace = self.unload_grace if grace is None else grace
        for dependent in self._dependents(name):  # an ensemble goes before its steps (Triton)
            await self.unload(dependent, grace, why)
        if entry.loading:
            # As Triton: the unload takes effect once the load in progress has ended.
            log.info("unloading model '%s' once its load in progress ends", name)
        async with entry.lock:
            runtimes = list(entry.versions.values())
            if not runtimes:
                return  # already unloaded (shutdown unloads twice when requests were refused)
            entry.versions.clear()
            await asyncio.gather(*(r.unload(grace, why) for r in runtimes))
            for runtime in runtimes:
                entry.dead[runtime.version] = "unloaded"
            self._serve_from(entry, None)
            if all(r.detached for r in runtimes):
                log.info(
                    "detached model '%s': its instances keep running for the next daemon", name
                )
            else:
                log.info("unloaded model '%s'", name)

    def _dependents(self, name: str) -> list[str]:
        """The models with a loaded version that runs its requests on ``name``."""
        return sorted(
            other
            for other, entry in self.entries.items()
            if any(name in runtime.depends_on for runtime in entry.versions.values())
        )

    async def unload_all(self, grace: float | None = None, why: str = "") -> None:
        """Cancel the loads clients asked for, let their unloads end, then unload every
        model; ``why`` ends the message of requests still executing."""
        loads = list(self._client_loads)
        for task in loads:
            task.cancel()
        await asyncio.gather(*loads, *self._client_unloads, return_exceptions=True)
        await asyncio.gather(
            *(self.unload(n, grace, why) for n in list(self.entries)), return_exceptions=True
        )

    def _serve_from(self, entry: ModelEntry, model_dir: Path | None) -> None:
        """Record where ``entry``'s versions come from; the upload they left is removed (its
        runtimes are gone: unloaded, or retired by the load that replaced them)."""
        previous, entry.model_dir = entry.model_dir, model_dir
        if self.uploads is not None and previous is not None and previous != model_dir:
            self.uploads.remove(previous)

    def reject_waiting(self, error: PbdError) -> int:
        """Fail every request still queued (not yet executing), in every model; how many."""
        failed = 0
        for entry in self.entries.values():
            for runtime in entry.versions.values():
                failed += runtime.reject_waiting(error)
        return failed

    async def poll(self) -> None:
        """One pass of poll mode: load new or changed models, unload removed ones. A model
        whose load or unload is in progress (a startup load hung in initialize()) is left to
        it: the pass does not wait for it, and a later pass sees what changed meanwhile."""
        present = set(self.model_names())
        for name in sorted(present):
            entry = self.entries.get(name)
            if entry is not None and entry.lock.locked():
                continue
            if entry is None or model_signature(self.root / name) != entry.signature:
                try:
                    await self.load(name)
                except PbdError:
                    pass  # logged by load; the index shows the reason
        for name in sorted(set(self.entries) - present):
            entry = self.entries[name]
            if entry.versions and not entry.lock.locked():
                await self.unload(name)

    # -- queries -------------------------------------------------------------------------------

    def all_ready(self) -> bool:
        """Every model that was asked to load serves all its versions."""
        return all(
            not e.error and not e.dead and all(r.ready for r in e.versions.values())
            for e in self.entries.values()
            if e.versions or e.error or any(reason != "unloaded" for reason in e.dead.values())
        )

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        out: list[IndexEntry] = []
        for name in sorted(set(self.model_names()) | set(self.entries)):
            entry = self.entries.get(name)
            if entry is None:
                if not ready_only:
                    out.append(IndexEntry(name))
                continue
            rows: dict[int, IndexEntry] = {
                v: IndexEntry(name, str(v), "UNAVAILABLE", reason)
                for v, reason in entry.dead.items()
            }
            for version, runtime in entry.versions.items():
                state = runtime.state.value
                if runtime.state is VersionState.READY and not runtime.ready:
                    state = "UNAVAILABLE"
                reason = runtime.reason
                if runtime.scaler is not None and runtime.serving:
                    reason = runtime.scaler.status()
                rows[version] = IndexEntry(name, str(version), state, reason)
            for version, runtime in entry.loading.items():
                rows.setdefault(version, IndexEntry(name, str(version), "LOADING", runtime.reason))
            if entry.error and not entry.versions:
                rows.setdefault(-1, IndexEntry(name, "", "UNAVAILABLE", entry.error))
            if not rows and not ready_only:
                rows[-1] = IndexEntry(name)  # known, nothing loaded: as a model never loaded
            for version in sorted(rows):
                row = rows[version]
                if not ready_only or row.state == "READY":
                    out.append(row)
        return out

    def lookup(self, name: str, version: str) -> VersionRuntime:
        """The runtime serving ``name``/``version`` ("" = latest ready), or Triton's error."""
        number = parse_version(version)
        entry = self.entries.get(name)
        if entry is None or not (entry.versions or entry.dead):
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if number == -1:
            latest: VersionRuntime | None = None
            for candidate in entry.versions.values():
                if candidate.serving and (latest is None or candidate.version > latest.version):
                    latest = candidate
            if latest is None:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return latest
        runtime = entry.versions.get(number)
        if runtime is None:
            if number in entry.dead:
                raise unavailable(
                    f"Request for unknown model: '{name}' version {number} is not at ready state"
                )
            raise not_found(f"Request for unknown model: '{name}' version {number} is not found")
        if not runtime.serving:
            raise unavailable(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
            )
        return runtime

    def runtimes(self) -> list[VersionRuntime]:
        """Every version runtime that has workers: serving, and being loaded."""
        return [
            runtime
            for entry in self.entries.values()
            for runtime in (*entry.versions.values(), *entry.loading.values())
        ]

    def ready_versions(self, name: str) -> list[int]:
        entry = self.entries.get(name)
        return sorted(v for v, r in entry.versions.items() if r.serving) if entry else []


def _reason(result: BaseException) -> str:
    """Why a version failed to load, as Triton's index and load error say it."""
    return status_text(result) if isinstance(result, PbdError) else f"Internal: {result!r}"


def _is_dir(path: Path) -> bool:
    """False for any name the file system cannot hold (too long, say), as for a missing one."""
    try:
        return path.is_dir()
    except OSError:
        return False


def parse_version(text: str) -> int:
    if text == "":
        return -1
    # ASCII digits only: int() also reads "1_0" as 10 and "١" (Arabic-Indic one) as 1.
    value = int(text) if text.isascii() and text.isdigit() else -2
    if value < 0:
        raise invalid_arg(
            f"failed to get model version from specified version string '{text}' (details: "
            "invalid literal), version should be an integral value > 0"
        )
    return value


def _settled(task: asyncio.Task[None]) -> None:
    """A client's load or unload that nobody awaits any more: its failure was logged."""
    if not task.cancelled():
        task.exception()
