from __future__ import annotations

import subprocess
import sys

from pbd.memory.malloc import TUNING, describe


def test_glibc_accepts_every_setting():
    # In a child process: the settings are process-wide and should not leak into pytest's.
    code = "from pbd.memory.malloc import tune_malloc; r = tune_malloc(); print(sorted(r.items()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sorted((k, True) for k in TUNING))


def test_describe_names_every_setting():
    text = describe()
    assert all(name in text for name in TUNING) and "M_ARENA_MAX=2" in text
