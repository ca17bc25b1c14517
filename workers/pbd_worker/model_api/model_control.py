"""``pb_utils.load_model``, ``unload_model`` and ``is_model_ready``: model control from a model.

They ask the daemon, which applies its model-control mode: outside explicit mode it refuses as
Triton does. The answer comes back over the worker's connection (``state.model_control``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pbd_worker.model_api import state
from pbd_worker.model_api.errors import TritonModelException


def _control() -> Callable[..., Any]:
    control = state.model_control
    if control is None:
        raise TritonModelException(
            "model control from a Python model is only available while the model runs in a "
            "pbd worker"
        )
    return control


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name``; ``config`` is a JSON override, ``files`` maps
    ``"file:<path>"`` to contents (and needs ``config``)."""
    if not isinstance(config, str):
        raise TritonModelException("config must be a JSON string")
    if config:
        try:
            json.loads(config)
        except ValueError as exc:
            raise TritonModelException(f"config is not valid JSON: {exc}") from None
    files = dict(files or {})
    for key, value in files.items():
        if not isinstance(key, str) or not isinstance(value, bytes):
            raise TritonModelException("files must map 'file:<path>' strings to bytes")
    if files and not config:
        raise TritonModelException("files can only be given together with a config")
    _control()("load", model_name, config=config, files=files)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    _control()("unload", model_name, unload_dependents=bool(unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    if not isinstance(model_version, str):
        raise TritonModelException("model_version must be a str")
    return bool(_control()("ready", model_name, version=model_version).ready)
