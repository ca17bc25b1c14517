"""A model's configuration as Triton serves it: config.pbtxt completed by the model itself.

Before any instance starts, a model whose file defines ``auto_complete_config`` gets a worker
of its own (started for this only, under the model's EXECUTION_ENV_PATH environment, and gone
after): model code never runs in the daemon. The worker hands the static method a
``pb_utils.ModelConfig`` of the configuration so far and sends back what it made of it, which
is then filled with Triton's defaults and checked like any config.pbtxt. That completed
configuration, its instance groups normalized for this machine's GPUs, is what initialize()
gets, what ModelConfig/ModelMetadata return and what the daemon schedules by. A directory
without config.pbtxt loads too (name from the directory, backend python), as in Triton. A
model of a Python-based backend is completed by the backend's model.py
(pbd.modelconfig.backends looks the backend up first). ``--disable-auto-complete-config`` turns
the hook off.

Only files that mention ``auto_complete_config`` get a worker: starting a Python process per
model load just to learn that a model has no such method would slow every load.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from pbd.errors import Code, PbdError, unavailable
from pbd.execenv.prepare import WorkerEnv, model_worker_env
from pbd.modelconfig.backends import BACKEND_MODEL_FILE, backend_dir, resolve_backend
from pbd.modelconfig.json_form import config_to_dict
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import (
    DEFAULT_MODEL_FILENAME,
    build_model_config,
    check_model_filename,
    model_config_from_json,
    read_model_config,
)
from pbd.settings import Settings
from pbd.version.placement import normalize_instance_groups
from pbd.worker.connect import connected_or_exited
from pbd.worker.hub import WorkerHub
from pbd.worker.launcher import InstanceLauncher, ProcessLauncher, WorkerSpec
from pbd.worker.link import WorkerLink
from pbd_wire import TOKEN_ENV
from pbd_wire import worker_pb2 as wpb

log = logging.getLogger("pbd.repository")
HOOK = "auto_complete_config"
_runs = itertools.count(1)


class ConfigCompleter:
    """Loads model configurations, running ``auto_complete_config`` where models have it."""

    def __init__(
        self,
        settings: Settings,
        hub: WorkerHub,
        launcher: InstanceLauncher | None = None,
        gpus: Sequence[int] = (),
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.gpus = gpus
        # Always a child process, also under the systemd launcher: it lives for one call.
        self.launcher = launcher or ProcessLauncher(settings.worker_scheduling)

    async def load(self, model_dir: Path, override_json: str | None = None) -> ModelConfig:
        return normalize_instance_groups(await self._complete(model_dir, override_json), self.gpus)

    async def _complete(self, model_dir: Path, override_json: str | None) -> ModelConfig:
        name = model_dir.name
        disabled = self.settings.disable_auto_complete_config
        message, source = read_model_config(
            model_dir, override_json=override_json, allow_missing=not disabled
        )
        backends = self.settings.backend_directory
        resolve_backend(message, model_dir, backends, source)
        if disabled:
            return build_model_config(message, name, source)
        if not message.name:
            message.name = name
        if not message.backend and not message.platform:
            message.backend = "python"
        code_dir = backend_dir(message.backend, backends)
        if code_dir is not None:
            model_file = _with_hook(code_dir / BACKEND_MODEL_FILE)
            version = ""
        else:
            if message.default_model_filename:  # checked before the hook's file is even read
                check_model_filename(message.default_model_filename, source)
            model_file = _model_file(model_dir, message.default_model_filename)
            version = model_file.parent.name if model_file is not None else ""
        if message.platform or model_file is None:
            return build_model_config(message, name, source)
        env = await model_worker_env(
            dict((k, v.string_value) for k, v in message.parameters.items()),
            model_dir,
            self.settings.execution_env_cache_dir,
            backend_dir=code_dir,
        )
        request = wpb.AutoComplete(
            model_path=str(model_file),
            model_dir=str(model_dir),
            version=version,
            config_json=json.dumps(config_to_dict(message)),
            backend_dir=str(code_dir or ""),
        )
        completed = await self._run(name, request, env)
        return model_config_from_json(
            completed, model_name=name, source=f"{source} (completed by {HOOK})"
        )

    async def _run(self, model: str, request: wpb.AutoComplete, env: WorkerEnv | None) -> str:
        """Start a worker for ``request``; the JSON it answers, or its error raised."""
        instance_id = f"{model}/{HOOK}/{next(_runs)}"
        token = self.launcher.token(instance_id)
        connected = self.hub.expect(instance_id, token)
        variables = {TOKEN_ENV: token, **(env.variables if env else {})}
        spec = WorkerSpec(
            instance_id, self.hub.address, variables, python=env.python if env else ""
        )
        what = f"the {HOOK} worker of model '{model}'"
        conn: WorkerLink | None = None
        try:
            handle = await self.launcher.start(spec)
        except OSError as exc:
            self.hub.forget(instance_id)
            raise unavailable(f"{what} could not be started: {exc}") from None
        try:
            timeout = self.settings.worker_start_timeout_secs
            conn = await connected_or_exited(self.launcher, handle, connected, timeout, what)
            conn.send(wpb.DaemonToWorker(auto_complete=request))
            reply = await self._reply(conn, what)
        finally:
            connected.cancel()
            self.hub.forget(instance_id)
            if conn is not None:
                conn.close()
            with contextlib.suppress(Exception):
                await self.launcher.stop(handle, 5.0)
        if reply.HasField("error"):
            if reply.error.traceback:
                log.error("%s failed:\n%s", what, reply.error.traceback)
            raise PbdError(Code.parse(reply.error.code), reply.error.message)
        return reply.config_json

    async def _reply(self, conn: WorkerLink, what: str) -> wpb.AutoCompleted:
        timeout = self.settings.model_init_timeout_secs
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                message = await asyncio.wait_for(conn.recv(), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                raise unavailable(f"{what}: {HOOK} did not return in {timeout:g}s") from None
            if message is None:
                raise unavailable(f"{what} exited before answering")
            if message.WhichOneof("kind") == "auto_completed":
                return message.auto_completed
            # Anything else (custom-metric updates of module-level code) has no one to go to.


def _model_file(model_dir: Path, filename: str) -> Path | None:
    """The model file of the newest version directory, if it defines the hook."""
    versions = sorted((int(p.name), p) for p in _subdirs(model_dir) if p.name.isdigit())
    if not versions:
        return None
    return _with_hook(versions[-1][1] / (filename or DEFAULT_MODEL_FILENAME))


def _with_hook(path: Path) -> Path | None:
    """``path`` if it is a file that defines the hook."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return path if HOOK in text else None


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []
