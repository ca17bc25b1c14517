"""Import a Triton ``model.py`` the way Triton does, and report failures as readable text."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from typing import Any


class ModelLoadError(Exception):
    """model.py could not be imported or has no usable ``TritonPythonModel``."""

    def __init__(self, message: str, tb: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.traceback = tb


def load_model_class(model_path: str, model_dir: str, version: str, backend_dir: str = "") -> type:
    """Import ``<model_dir>/<version>/<file>.py`` as module ``<version>.<file>``.

    The model directory and the version directory go on ``sys.path``, so a multi-file model can
    use relative imports (``from . import helper``) as well as plain ones (``import helper``).
    A Python-based backend's ``<backend_dir>/model.py`` is module ``model`` instead, with only
    the backend's directory on ``sys.path``, as Triton's stub imports it.
    """
    stem = os.path.splitext(os.path.basename(model_path))[0]
    if backend_dir:
        paths, module_name = [backend_dir], stem
    else:
        paths, module_name = [os.path.join(model_dir, version), model_dir], f"{version}.{stem}"
    for path in paths:
        if path not in sys.path:
            sys.path.insert(0, path)
    if not os.path.isfile(model_path):
        raise ModelLoadError(f"model file '{model_path}' does not exist")
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ModelLoadError(
            f"failed to load '{model_path}': SyntaxError: {exc.msg} "
            f"(line {exc.lineno}, offset {exc.offset})",
            traceback.format_exc(),
        ) from exc
    except BaseException as exc:  # noqa: BLE001 - a model's import may raise anything
        raise ModelLoadError(
            f"failed to load '{model_path}': {type(exc).__name__}: {exc}", traceback.format_exc()
        ) from exc
    cls = getattr(module, "TritonPythonModel", None)
    if not inspect.isclass(cls):
        raise ModelLoadError(f"'{model_path}' does not define class 'TritonPythonModel'")
    if not callable(getattr(cls, "execute", None)):
        raise ModelLoadError(
            f"'{model_path}': TritonPythonModel does not implement `execute` method"
        )
    return cls


# pbd's own code between the model and the daemon: its frames are no business of a client.
_PBD_FILES = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)
_PBD_MODULES = ("triton_python_backend_utils.py",)


def _is_pbd_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_PBD_FILES) or os.path.basename(path) in _PBD_MODULES


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """``("<Type>: <message>\\n\\nAt:\\n  file(line): func ...", traceback text)``.

    The 'At:' list, innermost frame first, is the shape Triton users know from its stub, and
    like the stub's it holds only the model's frames (and what the model called): pbd's
    worker frames stay out of what the client sees; the full traceback text keeps them, for
    the log.
    """
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_pbd_frame(f.filename)]
    at = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    text = f"{type(exc).__name__}: {exc}"
    if at:
        text += f"\n\nAt:\n{at}"
    return text, "".join(traceback.format_exception(exc))


def call_maybe_async(loop: Any, fn: Any, *args: Any) -> Any:
    """Call ``fn``; if it returns an awaitable (``async def`` hooks), run it on ``loop``."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = loop.run_until_complete(result)
    return result
