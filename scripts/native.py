"""Compile the daemon's request path with mypyc, in place.

    python scripts/native.py [--clean] [--force]

The modules below (HTTP/2, the gRPC call, request conversion and validation, the dispatch to
an instance and its worker link, the result and its statistics) are compiled into C
extensions beside their sources, with one shared library for the group
(``service/pbd/_native__mypyc*.so``). ``service/pbd/_native.json`` records the modules and
the size and modification time of every source of ``pbd`` and ``pbd_wire``. ``pbd.native``
reads it at import: the compiled modules are used only while every source is as it was and
``PBD_NATIVE`` is not ``0``. An edited source makes the whole group run as Python, with a
warning in the daemon's log, until this runs again (it does nothing while the build is up to
date; ``--force`` builds anyway). ``--clean`` removes what a build left.

Why (bench/README.md, "Fourth step"): the daemon's cost per small call is Python's
interpreter spread thin over many functions; the same code compiled takes about a fifth
fewer instructions per call, with no change to what it does. mypyc compiles the code as it
is typed (mypy --strict, the project's configuration), so it needs mypy (the ``native``
extra) and a C compiler; scripts/bootstrap.sh runs this after installing, and the daemon
runs as plain Python wherever it could not.

Left out, each for a reason: ``pbd.version.runtime`` (``EnsembleRuntime`` subclasses its
class, and a compiled class makes no instance of a Python subclass; compiled with it, the
subclass's ``super().__init__(**kwargs)`` failed), modules with async generators
(``pbd.dataplane``, ``pbd.grpc.servicer``: mypyc cannot compile them), ``pbd.types``
(mypyc fails on its dataclass fields typed ``memoryview``), ``pbd.h2.connection`` (an
asyncio protocol class: mypyc's classes cannot subclass it), and everything in the workers
(a model's code meets ``pb_utils`` objects there, which must stay plain Python classes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "service"
GROUP = "pbd._native"
STAMP = SERVICE / "pbd" / "_native.json"
MODULES = [
    "pbd.h2.frames",
    "pbd.h2.fields",
    "pbd.h2.header_encoding",
    "pbd.h2.header_blocks",
    "pbd.h2.limits",
    "pbd.h2.core",
    "pbd.h2.sending",
    "pbd.grpc.calls",
    "pbd.grpc.deframing",
    "pbd.grpc.convert",
    "pbd.grpc.eager",
    "pbd.grpc.wire",
    "pbd.grpc.status",
    "pbd.grpc.deadlines",
    "pbd.validation",
    "pbd.answer",
    "pbd.version.dispatch",
    "pbd.instance.instance",
    "pbd.instance.inflight",
    "pbd.instance.requests",
    "pbd.instance.memory",
    "pbd.instance.messages",
    "pbd.stats",
    "pbd.worker.link",
]


def source(module: str) -> Path:
    return SERVICE / (module.replace(".", "/") + ".py")


def built() -> list[Path]:
    """What a build left in the tree: extensions beside the sources, and the stamp."""
    found = [p for p in (SERVICE / "pbd").rglob("*.so") if p.is_file()]
    return [*found, STAMP] if STAMP.exists() else found


def clean() -> None:
    for path in built():
        path.unlink()


def build() -> None:
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        raise SystemExit(f"native: needs mypy and setuptools (the native extra): {exc}") from exc
    clean()  # a stale extension would shadow its source while this builds
    # The sources as compiled: one edited while this runs makes the build stale at once.
    from pbd.native import snapshot, source_roots

    sources = snapshot(source_roots())
    paths = [str(source(m).relative_to(SERVICE)) for m in MODULES]
    here = Path.cwd()
    # mypyc names modules from the paths, relative to the working directory, and the project's
    # mypy configuration (pyproject.toml) finds the rest of the code and its stubs.
    os.chdir(SERVICE)
    os.environ["MYPYPATH"] = os.pathsep.join(str(ROOT / d) for d in ("service", "workers"))
    try:
        with tempfile.TemporaryDirectory(prefix="pbd-native-") as scratch:
            lib = str(Path(scratch) / "lib")
            extensions = mypycify(
                ["--config-file", str(ROOT / "pyproject.toml"), *paths],
                opt_level="3",
                group_name=GROUP,
                target_dir=str(Path(scratch) / "c"),
            )
            setup(
                name="pbd-native",
                ext_modules=extensions,
                script_args=[
                    "-q",
                    "build_ext",
                    "--inplace",
                    "--build-temp",
                    scratch,
                    "--build-lib",
                    lib,
                ],
            )
    finally:
        os.chdir(here)
    stamp = {"group": GROUP, "modules": MODULES, "sources": sources}
    STAMP.write_text(json.dumps(stamp, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/native.py", description=__doc__)
    parser.add_argument("--clean", action="store_true", help="remove what a build left")
    parser.add_argument("--force", action="store_true", help="build even if up to date")
    opts = parser.parse_args(argv)
    if opts.clean:
        clean()
        return 0
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("native: no C compiler (cc); pbd runs as plain Python", file=sys.stderr)
        return 1
    if not opts.force and up_to_date():
        print(f"native: {len(MODULES)} modules compiled, up to date with their sources")
        return 0
    build()
    print(f"native: compiled {len(MODULES)} modules ({GROUP})")
    return 0


def up_to_date() -> bool:
    """Whether the last build's extensions are all there and every source is as it was."""
    from pbd import native

    return not native.STALE and native.extensions() == set(MODULES)


if __name__ == "__main__":
    sys.exit(main())
