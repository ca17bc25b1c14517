"""pbd.native: the compiled request path is used only while it matches the sources.

A package made in tmp_path stands in for pbd: a module with a source and, beside it, a file
named as its extension would be (not loadable: Python would fail on it, so a test that
imports the module proves the source was taken). ``install`` itself runs in a fresh
interpreter, on the real package, with its state read back.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pbd import native

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def package(root: Path) -> Path:
    pkg = root / "nativepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("WHERE = 'source'\n")
    (pkg / "sub" / f"mod{SUFFIX}").write_bytes(b"not an ELF file")
    (pkg / f"_group__mypyc{SUFFIX}").write_bytes(b"not an ELF file")
    return pkg


def test_the_extensions_beside_the_sources_name_their_modules(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "plain.py").write_text("")
    (pkg / "sub" / "other.abi3.so").write_bytes(b"")
    assert native.extensions(pkg) == {"nativepkg.sub.mod", "nativepkg.sub.other"}


def test_a_source_edited_added_or_removed_is_a_change(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    before = native.snapshot([pkg])
    assert set(before) == {
        "nativepkg/__init__.py", "nativepkg/sub/__init__.py", "nativepkg/sub/mod.py",
    }  # fmt: skip
    assert native.changed(before, native.snapshot([pkg])) == []
    mod = pkg / "sub" / "mod.py"
    mod.write_text("WHERE = 'edited'\n")
    later = time.time_ns() + 10**9  # a new mtime, whatever the file system's granularity
    os.utime(mod, ns=(later, later))
    (pkg / "new.py").write_text("")
    (pkg / "sub" / "__init__.py").unlink()
    assert native.changed(before, native.snapshot([pkg])) == [
        "nativepkg/new.py", "nativepkg/sub/__init__.py", "nativepkg/sub/mod.py",
    ]  # fmt: skip


def test_from_source_imports_the_source_beside_an_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = native.FromSource({"nativepkg.sub.mod"})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for name in ("nativepkg", "nativepkg.sub", "nativepkg.sub.mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import nativepkg.sub.mod  # type: ignore[import-not-found]

    assert nativepkg.sub.mod.WHERE == "source"
    assert finder.find_spec("nativepkg.sub.other", [str(tmp_path / "nativepkg" / "sub")]) is None
    assert finder.find_spec("nativepkg.sub.mod", None) is None  # not in a package: not ours


def state(env: dict[str, str]) -> list[str]:
    """pbd.native's decision in a fresh interpreter: STATE, STALE, and where a compiled
    module (if any) came from."""
    code = (
        "import pbd.native as n, sys, json\n"
        "mods = sorted(n.extensions())\n"
        "origin = __import__(mods[0], fromlist=['_']).__file__ if mods else ''\n"
        "print(json.dumps([n.STATE, str(n.STALE), origin]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return list(json.loads(done.stdout))


@pytest.mark.skipif(
    not native.STAMP.exists(), reason="the request path is not compiled (scripts/native.py)"
)
def test_the_compiled_modules_are_used_unless_pbd_native_is_0() -> None:
    env = {k: v for k, v in os.environ.items() if k != native.DISABLE_ENV}
    if json.loads(native.STAMP.read_text())["sources"] != native.snapshot(native.source_roots()):
        pytest.skip("sources changed since scripts/native.py ran")
    compiled, stale, origin = state(env)
    assert (compiled, stale) == (f"compiled ({len(native.extensions())} modules)", "False")
    assert origin.endswith(SUFFIX)
    python, stale, origin = state({**env, native.DISABLE_ENV: "0"})
    assert (python, stale) == ("Python (PBD_NATIVE=0)", "True")
    assert origin.endswith(".py")


def test_without_extensions_pbd_runs_its_sources() -> None:
    if native.extensions():
        pytest.skip("compiled here: the state without extensions cannot be seen")
    python, stale, _ = state(dict(os.environ))
    assert python.startswith("Python (not compiled") and stale == "False"


def test_install_keeps_the_extensions_only_while_the_sources_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = package(tmp_path)
    stamp = pkg / "_native.json"
    monkeypatch.setattr(native, "PACKAGE", pkg)
    monkeypatch.setattr(native, "STAMP", stamp)
    monkeypatch.setattr(native, "source_roots", lambda: [pkg])
    monkeypatch.setattr(native, "STATE", native.STATE)
    monkeypatch.setattr(native, "STALE", native.STALE)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)

    def install() -> tuple[str, bool, bool]:
        before = list(sys.meta_path)
        native.install()
        added = [f for f in sys.meta_path if f not in before]
        sys.meta_path[:] = before
        return native.STATE, native.STALE, bool(added)

    stamp.write_text("{")
    state, stale, finder = install()
    assert state.startswith("Python (_native.json unreadable") and stale and finder
    stamp.write_text(json.dumps({"sources": native.snapshot([pkg])}))
    assert install() == ("compiled (1 modules)", False, False)
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert install() == ("Python (PBD_NATIVE=0)", True, True)
    monkeypatch.delenv(native.DISABLE_ENV)
    mod = pkg / "sub" / "mod.py"
    later = time.time_ns() + 10**9
    os.utime(mod, ns=(later, later))
    assert install() == (
        "Python (sources changed since scripts/native.py ran: nativepkg/sub/mod.py)",
        True,
        True,
    )


@pytest.mark.skipif(
    not native.STAMP.exists(), reason="the request path is not compiled (scripts/native.py)"
)
def test_no_python_class_of_pbd_subclasses_a_compiled_one() -> None:
    """A compiled class refuses to make an instance of a Python subclass (TypeError:
    interpreted classes cannot inherit from compiled): a subclass must be compiled with it."""
    env = {k: v for k, v in os.environ.items() if k != native.DISABLE_ENV}
    code = (
        "import importlib, inspect, pkgutil, pbd, pbd.native as n\n"
        "assert not n.STALE, n.STATE\n"
        "compiled = n.extensions()\n"
        "for m in pkgutil.walk_packages(pbd.__path__, 'pbd.'):\n"
        "    if m.name == 'pbd.__main__' or m.name in compiled:\n"
        "        continue\n"
        "    for _, cls in inspect.getmembers(importlib.import_module(m.name), inspect.isclass):\n"
        "        bases = [b for b in cls.__mro__[1:] if b.__module__ in compiled]\n"
        "        if cls.__module__ == m.name and bases:\n"
        "            print(m.name, cls.__name__, bases)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if "sources changed" in done.stderr:
        pytest.skip("sources changed since scripts/native.py ran")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
