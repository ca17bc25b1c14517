"""Whether this process runs pbd's compiled request path or its Python sources.

``scripts/native.py`` compiles the modules of the request path with mypyc into C extensions
beside their sources, and writes ``_native.json`` in this package: the modules compiled, and
the size and modification time of every Python source of ``pbd`` and ``pbd_wire`` when it
ran. Python imports an extension before a source of the same name, so an extension built from
older sources would shadow the code as it is now. :func:`install` (run by ``pbd/__init__``
before anything else of pbd is imported) keeps the extensions only while every source is as
it was at the build and ``PBD_NATIVE`` is not ``0``; otherwise the compiled modules are
imported from their sources (all of them: compiled modules call each other directly, so one
edited module could not be mixed with the others). :data:`STATE` says which, for the
daemon's log.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent
STAMP = PACKAGE / "_native.json"
DISABLE_ENV = "PBD_NATIVE"
# Longest first: ".cpython-311-x86_64-linux-gnu.so" before ".so".
SUFFIXES = sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True)

# What this process runs, for the log: "compiled (N modules)" or "Python (why)".
STATE = "Python (not compiled: scripts/native.py was not run)"
# False: the compiled modules are left to Python's own import (their extensions); True: they
# are imported from their sources.
STALE = False


def source_roots() -> list[Path]:
    """The trees whose sources the compiled modules were built against."""
    roots = [PACKAGE]
    spec = importlib.util.find_spec("pbd_wire")
    if spec is not None and spec.submodule_search_locations:
        roots.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return roots


def snapshot(roots: Sequence[Path]) -> dict[str, list[int]]:
    """``{path: [size, mtime_ns]}`` of every Python source under ``roots``."""
    out: dict[str, list[int]] = {}
    for root in roots:
        base = len(str(root.parent)) + 1
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    info = os.stat(path)
                    out[path[base:]] = [info.st_size, info.st_mtime_ns]
    return out


def changed(recorded: dict[str, list[int]], now: dict[str, list[int]]) -> list[str]:
    """The sources added, removed or modified since ``recorded``, sorted."""
    return sorted(
        name for name in recorded.keys() | now.keys() if recorded.get(name) != now.get(name)
    )


class FromSource:
    """Imports ``modules`` from their ``.py`` files, whatever extension lies beside them."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules or not path:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def extensions(package: Path | None = None) -> set[str]:
    """The modules of ``package`` (pbd) that have a compiled extension beside them (the
    group's shared library left out)."""
    package = package or PACKAGE
    found = set()
    base = len(str(package.parent)) + 1
    for folder, _dirs, files in os.walk(package):
        for name in files:
            suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
            if suffix is not None and not name[: -len(suffix)].endswith("__mypyc"):
                module = os.path.join(folder, name[: -len(suffix)])[base:]
                found.add(module.replace(os.sep, "."))
    return found


def install() -> None:
    """Decide between the extensions and the sources, once per process (see the module)."""
    global STATE, STALE
    modules = extensions()
    if not modules:
        return
    try:
        recorded = json.loads(STAMP.read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"{STAMP.name} unreadable ({exc}): run scripts/native.py again"
    else:
        if os.environ.get(DISABLE_ENV) == "0":
            why = f"{DISABLE_ENV}=0"
        else:
            edited = changed(recorded, snapshot(source_roots()))
            if not edited:
                STATE, STALE = f"compiled ({len(modules)} modules)", False
                return
            more = f" and {len(edited) - 3} more" if len(edited) > 3 else ""
            why = f"sources changed since scripts/native.py ran: {', '.join(edited[:3])}{more}"
    STATE, STALE = f"Python ({why})", True
    sys.meta_path.insert(0, FromSource(modules))
