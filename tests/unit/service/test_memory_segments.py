from __future__ import annotations

import subprocess
import sys

from pbd.memory.segments import remove_segments, segment_namer


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_segments_of_dead_daemons_go_live_ones_stay(tmp_path):
    dead, alive = _dead_pid(), 1
    for name in (
        f"pbd-{dead}xab12cd-0-d0",
        f"pbd-{alive}xab12cd-0-d0",
        "pbdother-5x1-0-d0",
        "unrelated",
    ):
        (tmp_path / name).write_bytes(b"x")
    removed = remove_segments("pbd", shm_dir=str(tmp_path))
    assert removed == [f"pbd-{dead}xab12cd-0-d0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"pbd-{alive}xab12cd-0-d0", "pbdother-5x1-0-d0", "unrelated"]
    )


def test_remove_own_segments_only(tmp_path):
    (tmp_path / "pbd-1xaa-0-d0").write_bytes(b"")
    (tmp_path / "pbd-1xbb-0-d0").write_bytes(b"")
    assert remove_segments("pbd", daemon_id="1xaa", shm_dir=str(tmp_path)) == ["pbd-1xaa-0-d0"]


def test_namer_is_unique_per_instance():
    name = segment_namer("pbd", "9xff")
    assert [name(), name()] == ["pbd-9xff-0", "pbd-9xff-1"]
