"""The model hooks around initialize/execute (``auto_complete_config``, ``is_ready``) and what
a worker reads from its Initialize (a fingerprint of it, whether the model is decoupled).

``auto_complete_config`` runs in a worker started only for it, before any instance: it imports
model.py, hands the static method a ``pb_utils.ModelConfig`` and sends back the completed JSON.
``is_ready`` runs between batches when the daemon asks (ModelReady).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from pbd_wire import worker_pb2 as wpb
from pbd_wire.batching import BatchingPolicy, direct_batching, instance_count
from pbd_worker.loader import (
    ModelLoadError,
    call_maybe_async,
    describe_exception,
    load_model_class,
)
from pbd_worker.model_api import state
from pbd_worker.model_api.model_config import ModelConfig
from pbd_worker.notify import Notifier

log = logging.getLogger("pbd_worker")


def auto_complete(message: wpb.AutoComplete) -> wpb.AutoCompleted:
    """The configuration ``auto_complete_config`` makes of ``message.config_json``; a model
    without the method gets its configuration back unchanged."""
    state.set_model_dir(message.model_dir)
    try:
        cls = load_model_class(
            message.model_path, message.model_dir, message.version, message.backend_dir
        )
    except ModelLoadError as exc:
        return _failed("INVALID_ARG", exc.message, exc.traceback)
    hook = getattr(cls, "auto_complete_config", None)
    if hook is None:
        return wpb.AutoCompleted(config_json=message.config_json)
    config = ModelConfig(message.config_json)
    try:
        completed = hook(config)
    except Exception as exc:  # noqa: BLE001 - the model's code may raise anything
        text, tb = describe_exception(exc)
        # Triton's conflict errors (ValueError) are the message users look for.
        message_text = str(exc) if isinstance(exc, ValueError) else text
        return _failed("INVALID_ARG", message_text, tb)
    if not isinstance(completed, ModelConfig):
        name = config.as_dict().get("name", "")
        return _failed(
            "INVALID_ARG",
            f"auto_complete_config function in model '{name}' must return a valid "
            "pb.ModelConfig object.",
        )
    try:
        text = json.dumps(completed.as_dict())
    except (TypeError, ValueError) as exc:
        return _failed("INVALID_ARG", f"the auto-completed configuration is not JSON: {exc}")
    return wpb.AutoCompleted(config_json=text)


def _failed(code: str, message: str, tb: str = "") -> wpb.AutoCompleted:
    return wpb.AutoCompleted(error=wpb.Error(code=code, message=message, traceback=tb))


def ask_ready(model: Any, loop: Any, query: wpb.ReadyQuery) -> wpb.ReadyReply:
    """The model's ``is_ready()`` (sync or ``async def``); it must return a bool."""
    hook = getattr(model, "is_ready", None)
    if hook is None:
        return wpb.ReadyReply(query=query.query, ready=model is not None, hooked=False)
    try:
        answer = call_maybe_async(loop, hook)
    except Exception as exc:  # noqa: BLE001 - report, the model is then not ready
        text, tb = describe_exception(exc)
        log.error("is_ready() raised: %s", text)
        error = wpb.Error(code="INTERNAL", message=f"is_ready() failed: {text}", traceback=tb)
        return wpb.ReadyReply(query=query.query, ready=False, error=error, hooked=True)
    if not isinstance(answer, bool):
        error = wpb.Error(
            code="INTERNAL",
            message=f"is_ready() must return a bool, it returned {type(answer).__name__}",
        )
        return wpb.ReadyReply(query=query.query, ready=False, error=error, hooked=True)
    return wpb.ReadyReply(query=query.query, ready=answer, hooked=True)


def report_init_failure(notify: Notifier, error: wpb.Error) -> None:
    """As a systemd unit, say in the unit's own journal and STATUS why initialize() failed
    (the daemon's journal has it too; under the process launcher only the daemon logs it,
    so the shared log carries it once)."""
    first = error.message.partition("\n")[0]  # the rest: the model's frames, in the traceback
    log.error("%s", f"{first}\n{error.traceback.rstrip()}" if error.traceback else error.message)
    notify.status(f"failed: {first}")


def init_fingerprint(init: wpb.Initialize) -> str:
    """What must match for a reconnecting worker to keep its model: the model file, version
    and every initialize() argument. Per-daemon fields (segment names, intervals) may differ."""
    digest = hashlib.sha256()
    for key, value in sorted(init.args.items()):
        digest.update(f"{key}={value}\0".encode())
    digest.update(f"{init.model_path}\0{init.model_dir}\0{init.version}".encode())
    return digest.hexdigest()


def declared_outputs(args: dict[str, str]) -> frozenset[str] | None:
    """The output names the model's config declares (None: it declares none, or cannot be
    read: nothing is pruned)."""
    try:
        config = json.loads(args.get("model_config") or "{}")
        names = frozenset(str(output["name"]) for output in config.get("output", []))
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    return names or None


def direct_batching_of(args: dict[str, str]) -> BatchingPolicy | None:
    """The dynamic batching this worker does itself for its front ends' requests
    (``pbd_worker.front_batcher``); None: the model has none a worker can honour alone."""
    try:
        config = json.loads(args.get("model_config") or "{}")
        return direct_batching(config)[0]
    except (ValueError, AttributeError, TypeError):
        return None


def version_name(args: dict[str, str]) -> str:
    """"model 'm' version 1", as the daemon names a version in its messages."""
    return f"model '{args.get('model_name', '')}' version {args.get('model_version', '1') or 1}"


def instances_of(args: dict[str, str]) -> int:
    """How many instances the model's configuration asks for (at least 1)."""
    try:
        return instance_count(json.loads(args.get("model_config") or "{}"))
    except (ValueError, AttributeError, TypeError):
        return 1


def decoupled(args: dict[str, str]) -> bool:
    """``model_transaction_policy { decoupled: true }`` in the model's config."""
    try:
        config = json.loads(args.get("model_config") or "{}")
        return bool(config.get("model_transaction_policy", {}).get("decoupled", False))
    except (ValueError, AttributeError):
        return False
