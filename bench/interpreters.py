"""Which Python build each server runs model code on, for ``bench.vs_triton``.

Triton's stub embeds the distribution's ``libpython`` (``/usr/bin/python3``'s build, whatever
the PATH or PYTHONPATH); pbd's daemon and workers run on the interpreter given to the
benchmark. Builds of the same Python version differ in speed (bench/README.md,
"Interpreter"), so a comparison records both and says when they differ.
"""

from __future__ import annotations

import subprocess

from bench import procstat
from bench.servers import ServerProcess

# The interpreter Triton's stub runs models on (scripts/triton.sh; the stub embeds its
# libpython, whatever the PATH or PYTHONPATH).
STUB_PYTHON = "/usr/bin/python3"
LIKE_FOR_LIKE = (
    "PYTHON=/usr/bin/python3 VENV=.venv-system scripts/bootstrap.sh, "
    "then --python .venv-system/bin/python"
)


def interpreter_version(python: str) -> str:
    """``sys.version`` of the interpreter ``python`` on one line; "" when it does not run."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(sys.version)"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return " ".join(done.stdout.split())


def interpreters(python: str, started: dict[str, ServerProcess]) -> dict[str, str]:
    """Which Python build each side runs model code on: pbd's ``--python`` and the stub's
    interpreter with their ``sys.version`` (``*_build``), and the runtime each server's first
    child mapped."""
    facts = {
        "pbd_python": python,
        "pbd_python_build": interpreter_version(python),
        "triton_stub_python": STUB_PYTHON,
        "triton_stub_python_build": interpreter_version(STUB_PYTHON),
    }
    for name, server in started.items():
        kids = procstat.children(server.pid)
        facts[f"{name}_children_runtime"] = procstat.python_runtime(kids[0]) if kids else ""
    return facts


def interpreter_note(facts: dict[str, str]) -> str:
    """A warning when pbd and Triton's stub run different Python builds (builds differ in
    speed: bench/README.md, "Against Triton"); "" when they are the same build."""
    pbd, stub = facts["pbd_python_build"], facts["triton_stub_python_build"]
    if pbd == stub:
        return ""
    return (
        f"note: pbd runs on {facts['pbd_python']} ({pbd}), Triton's stub on "
        f"{facts['triton_stub_python']} ({stub}): different Python builds, so the ratios also "
        f"measure the interpreters. Like for like: {LIKE_FOR_LIKE}"
    )
