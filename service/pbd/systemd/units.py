"""Unit names, the files the daemon writes for each instance unit, and ``pbd install-units``.

The shipped units live in ``deploy/systemd/`` (and inside the package, for installs without the
source tree). Installing copies them to a unit directory and adds a drop-in for ``pbd.service``
naming the Python environment and the model repository; nothing in the unit files themselves
depends on where pbd is installed, so ``systemd-analyze verify`` runs on them as shipped.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

WORKER_TEMPLATE = "pbd-worker@.service"
DAEMON_UNIT = "pbd.service"
UNIT_FILES = (DAEMON_UNIT, WORKER_TEMPLATE)
SHIPPED_DIR = Path(__file__).resolve().parents[3] / "deploy" / "systemd"

_SAFE = re.compile(r"[A-Za-z0-9:_.]")


def escape(text: str) -> str:
    """``systemd-escape``: '/' becomes '-', anything outside [A-Za-z0-9:_.] becomes \\xNN
    (a leading '.' too), so every string maps to one valid unit instance name and back."""
    out = []
    for i, char in enumerate(text):
        if char == "/":
            out.append("-")
        elif _SAFE.fullmatch(char) and not (i == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{b:02x}" for b in char.encode())
    return "".join(out)


def unescape(text: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\x", i) and i + 4 <= len(text):
            raw.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            raw.extend(b"/" if text[i] == "-" else text[i].encode())
            i += 1
    return raw.decode()


def worker_unit(instance_id: str) -> str:
    return f"pbd-worker@{escape(instance_id)}.service"


def model_slice(model: str) -> str:
    """``pbd-<model>.slice``, a child of ``pbd.slice`` (a '-' in a slice name nests it, so the
    model name is escaped: its own dashes become \\x2d)."""
    return f"pbd-{escape(model)}.slice"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by root only, replacing ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def env_file_text(values: dict[str, str]) -> str:
    """An EnvironmentFile: one KEY=value per line, values quoted for systemd's parser."""
    lines = []
    for key, value in values.items():
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{quoted}"')
    return "\n".join(lines) + "\n"


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return values
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        values[key] = value
    return values


def instance_dropin_text(model: str) -> str:
    return (
        "# Written by pbd: puts this instance in its model's slice.\n"
        f"[Service]\nSlice={model_slice(model)}\n"
    )


def shipped_units() -> dict[str, str]:
    """The unit files of the source tree pbd runs from (an editable install's checkout)."""
    base = SHIPPED_DIR
    if not all((base / name).is_file() for name in UNIT_FILES):
        raise FileNotFoundError(
            f"the pbd unit files are not in {base}: run install-units from a pbd checkout"
        )
    return {name: (base / name).read_text() for name in UNIT_FILES}


def install_dropin_text(python: str, repository: Path, extra: dict[str, str]) -> str:
    lines = [
        "# Written by `pbd install-units`.",
        "[Service]",
        f'Environment="PBD_PYTHON={python}"',
        f'Environment="PBD_MODEL_REPOSITORY={repository}"',
    ]
    lines += [f'Environment="{k}={v}"' for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def install(
    unit_dir: Path,
    repository: Path,
    python: str = sys.executable,
    extra_env: dict[str, str] | None = None,
) -> list[Path]:
    """Copy the units into ``unit_dir`` and write the pbd.service install drop-in."""
    written = []
    unit_dir.mkdir(parents=True, exist_ok=True)
    for name, text in shipped_units().items():
        target = unit_dir / name
        target.write_text(text)
        written.append(target)
    dropin = unit_dir / f"{DAEMON_UNIT}.d" / "10-install.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(install_dropin_text(python, repository.resolve(), extra_env or {}))
    written.append(dropin)
    return written
