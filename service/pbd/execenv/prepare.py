"""A model's own Python environment: where it is, unpacked, checked, and how a worker uses it.

``parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "..." } }`` names a virtualenv
(or conda env) directory, or a packed one (a tar archive, as conda-pack makes), as in Triton;
``$$TRITON_MODEL_DIRECTORY`` stands for the model's directory, and a relative path is taken
from there too. An archive is unpacked once (per path, modification time and size) into the
daemon's cache directory. The worker then runs under the environment's interpreter, finding
pbd_worker through ``PYTHONPATH`` (a directory that holds only pbd_worker, pbd_wire and
triton_python_backend_utils, so none of the daemon's packages shadow the environment's).

Before any worker starts, the interpreter is asked once for its version and whether it has
numpy and a protobuf that reads pbd's generated code; any problem fails that model's load
with the path and what is wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pbd_wire
import pbd_worker
from pbd.errors import Code, PbdError
from pbd.execenv.archive import Progress, UnsafeArchive, extract_archive

log = logging.getLogger("pbd.execenv")
ENV_PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIR_TOKEN = "$$TRITON_MODEL_DIRECTORY"
PROBE_TIMEOUT_S = 120.0
_DONE_MARK = ".pbd-unpacked"
# Pure-Python modules the worker imports besides numpy and protobuf, lent from the daemon.
_WORKER_EXTRAS = ("sdnotify",)

# Run by the environment's interpreter: its version, and what of the worker's needs it lacks.
_PROBE = """
import json, sys
out = {"version": list(sys.version_info[:2]), "prefix": sys.prefix, "problems": []}
for name in ("numpy", "google.protobuf"):
    try:
        __import__(name)
    except Exception as exc:
        out["problems"].append(f"cannot import {name} ({type(exc).__name__}: {exc})")
if not out["problems"]:
    try:
        import pbd_wire.worker_pb2
    except Exception as exc:
        out["problems"].append(f"its protobuf cannot load pbd's worker protocol ({exc})")
if not out["problems"]:
    try:
        import pbd_worker.runtime
    except Exception as exc:
        out["problems"].append(f"pbd's worker cannot start in it ({type(exc).__name__}: {exc})")
print(json.dumps(out))
"""


class EnvError(PbdError):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(Code.INVALID_ARG, f"{ENV_PARAMETER} '{path}': {problem}")


@dataclass(frozen=True)
class WorkerEnv:
    """How to start a worker in a model's environment."""

    python: str
    variables: Mapping[str, str] = field(default_factory=dict)
    root: str = ""


def env_path(
    parameters: Mapping[str, str], model_dir: Path, backend_dir: Path | None = None
) -> Path | None:
    """The environment ``parameters`` name, with ``$$TRITON_MODEL_DIRECTORY`` substituted;
    None when the model has none. The path as written must stay inside the model repository
    (``model_dir``'s parent): a config, which a client may override, never names code from
    elsewhere. Links inside the repository are the operator's to place and may point out. A
    model of a Python-based backend may also name what is in the backend's directory (the
    operator's too): the environment the backend ships (pbd.modelconfig.backends)."""
    raw = parameters.get(ENV_PARAMETER, "").strip()
    if not raw:
        return None
    path = Path(os.path.normpath(model_dir / raw.replace(MODEL_DIR_TOKEN, str(model_dir))))
    repository = Path(os.path.normpath(model_dir.parent))
    if backend_dir is not None and path.is_relative_to(os.path.normpath(backend_dir)):
        return path
    if path == repository or not path.is_relative_to(repository):
        raise EnvError(
            raw,
            f"leaves the model repository '{repository}': an environment must be inside it "
            "(for one kept elsewhere, place a link to it in the model's directory)",
        )
    return path


def default_cache_dir() -> Path:
    """systemd's CacheDirectory= when the daemon runs as a unit, else the user's cache."""
    systemd_cache = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if systemd_cache:
        return Path(systemd_cache) / "envs"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pbd" / "envs"


_lock = threading.Lock()
_prepared: dict[tuple[str, int, int, str], WorkerEnv] = {}


def prepare(path: Path, cache_dir: Path, step: Callable[[str], None] | None = None) -> WorkerEnv:
    """The :class:`WorkerEnv` of the environment at ``path`` (unpacking an archive into
    ``cache_dir`` first); raises :class:`EnvError`. Blocking: call it from a thread.
    ``step`` hears what it does meanwhile ("unpacking the model's environment 40%")."""
    shown = str(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise EnvError(shown, f"cannot be read: {exc.strerror or exc}") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, str(cache_dir))
    with _lock:  # one unpacking per archive, even when several models load it at once
        env = _prepared.get(key)
        if env is None:
            root = _unpacked(path, cache_dir, st, step) if path.is_file() else path
            env = _checked(shown, root, cache_dir)
            _prepared[key] = env
    return env


def _unpacked(
    archive: Path, cache_dir: Path, st: os.stat_result, step: Callable[[str], None] | None
) -> Path:
    digest = hashlib.sha256(
        f"{archive.resolve()}\0{st.st_mtime_ns}\0{st.st_size}".encode()
    ).hexdigest()[:16]
    stem = archive.name.split(".", 1)[0] or "env"
    root = cache_dir / f"{stem}-{digest}"
    if (root / _DONE_MARK).is_file():
        return root
    if root.exists():
        raise EnvError(str(archive), f"{root} exists but is not a complete unpacking; remove it")
    log.info("unpacking %s into %s (%.1f MB)", archive, root, st.st_size / 1e6)
    began = time.monotonic()

    def report(progress: Progress) -> None:
        log.info("unpacking %s: %s", archive.name, progress.describe())
        if step is not None:
            step(f"unpacking the model's environment {progress.percent}%")

    try:
        members = extract_archive(archive, root, report)
    except UnsafeArchive as exc:
        raise EnvError(str(archive), f"unsafe archive, not unpacked: {exc}") from None
    except (tarfile.TarError, EOFError) as exc:
        raise EnvError(str(archive), f"not a readable tar archive: {exc}") from None
    except OSError as exc:
        raise EnvError(str(archive), f"cannot unpack into {root}: {exc}") from None
    (root / _DONE_MARK).touch()
    log.info("unpacked %s in %.1fs (%d members)", archive, time.monotonic() - began, members)
    return root


def _interpreter(root: Path) -> Path | None:
    for name in ("python3", "python"):
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def worker_path(cache_dir: Path) -> Path:
    """A directory holding only (links to) pbd_worker, pbd_wire, triton_python_backend_utils and
    the worker's small pure-Python dependencies (not numpy or protobuf: the environment's own)."""
    package = Path(pbd_worker.__file__).resolve().parent
    wire = Path(pbd_wire.__file__).resolve().parent
    targets = [package, wire, package.parent / "triton_python_backend_utils.py"]
    for name in _WORKER_EXTRAS:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            origin = Path(spec.origin).resolve()
            targets.append(origin.parent if origin.name == "__init__.py" else origin)
    digest = hashlib.sha256("\0".join(map(str, targets)).encode()).hexdigest()[:12]
    shim = cache_dir / f"worker-path-{digest}"
    shim.mkdir(parents=True, exist_ok=True, mode=0o700)
    for target in targets:
        link = shim / target.name
        if not link.is_symlink():
            link.symlink_to(target)
    return shim


def _checked(shown: str, root: Path, cache_dir: Path) -> WorkerEnv:
    if not root.is_dir():
        raise EnvError(shown, "is neither a directory nor an archive file")
    python = _interpreter(root)
    if python is None:
        raise EnvError(shown, f"has no Python interpreter ({root}/bin/python3 is missing)")
    try:
        shim = worker_path(cache_dir)
    except OSError as exc:
        raise EnvError(shown, f"cannot prepare the worker's path in {cache_dir}: {exc}") from None
    variables = {
        "PYTHONPATH": str(shim),
        "PYTHONNOUSERSITE": "1",
        "VIRTUAL_ENV": str(root),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(root / "lib"), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
    }
    try:
        probe = subprocess.run(
            [str(python), "-c", _PROBE],
            env={**os.environ, **variables},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(shown, f"its interpreter {python} cannot run: {exc}") from None
    try:
        found = json.loads(probe.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (probe.stderr or probe.stdout).strip()[-600:]
        raise EnvError(
            shown, f"its interpreter {python} is broken (exit {probe.returncode}): {tail}"
        ) from None
    ours = list(sys.version_info[:2])
    if found["version"] != ours:
        have = ".".join(map(str, found["version"]))
        raise EnvError(
            shown,
            f"its Python is {have} but pbd runs Python {ours[0]}.{ours[1]}; build the "
            "environment with the same Python version",
        )
    if found["problems"]:
        raise EnvError(shown, f"{python}: " + "; ".join(found["problems"]))
    return WorkerEnv(python=str(python), variables=variables, root=str(root))


async def model_worker_env(
    parameters: Mapping[str, str],
    model_dir: Path,
    cache_dir: str,
    step: Callable[[str], None] | None = None,
    backend_dir: Path | None = None,
) -> WorkerEnv | None:
    """The environment a model's workers run in (None: the daemon's own), prepared off the
    event loop; ``cache_dir`` "" means :func:`default_cache_dir`; ``step`` as for
    :func:`prepare` (called from that thread); ``backend_dir`` as for :func:`env_path`."""
    path = env_path(parameters, model_dir, backend_dir)
    if path is None:
        return None
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    return await asyncio.to_thread(prepare, path, cache, step)
