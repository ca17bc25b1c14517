"""Which NVIDIA GPUs this process may use, found without importing cupy or CUDA."""

from __future__ import annotations

import os
import re


def visible_gpus(
    environ: dict[str, str] | None = None, proc_dir: str = "/proc/driver/nvidia/gpus"
) -> list[int]:
    """Device ordinals available to workers.

    The driver lists one directory per GPU under /proc; CUDA_VISIBLE_DEVICES (integer form)
    narrows and renumbers them as CUDA would.
    """
    environ = dict(os.environ) if environ is None else environ
    try:
        count = len(os.listdir(proc_dir))
    except OSError:
        count = len([d for d in _dev_entries() if re.fullmatch(r"nvidia\d+", d)])
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    chosen: list[int] = []
    for part in visible.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count:
            break  # CUDA stops at the first invalid entry
        chosen.append(int(part))
    return list(range(len(chosen)))


def _dev_entries() -> list[str]:
    try:
        return os.listdir("/dev")
    except OSError:
        return []
