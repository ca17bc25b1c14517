from __future__ import annotations

import os
from pathlib import Path

from pbd_wire.shm_owner import owner_path, remove_orphaned_record, try_lock


def _record(shm_dir: Path, daemon_base: str) -> int:
    """The daemon's side: its record, locked (an OFD lock: it holds against this process's
    other opens of the file too)."""
    fd = os.open(owner_path(daemon_base, str(shm_dir)), os.O_RDWR | os.O_CREAT, 0o600)
    assert try_lock(fd)
    return fd


def test_the_last_worker_out_removes_a_dead_daemons_record(tmp_path):
    os.close(_record(tmp_path, "pbd-7xab"))  # the daemon died: nobody holds the lock
    (tmp_path / "pbd-7xab-1-w0").write_bytes(b"")  # another instance's, still there
    assert not remove_orphaned_record("pbd-7xab-0", str(tmp_path))
    (tmp_path / "pbd-7xab-1-w0").unlink()
    assert remove_orphaned_record("pbd-7xab-1", str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_live_daemons_record_stays(tmp_path):
    fd = _record(tmp_path, "pbd-7xab")
    try:
        assert not remove_orphaned_record("pbd-7xab-0", str(tmp_path))
        assert [p.name for p in tmp_path.iterdir()] == ["pbd-7xab.owner"]
    finally:
        os.close(fd)


def test_no_record_nothing_to_do(tmp_path):
    assert not remove_orphaned_record("pbd-7xab-0", str(tmp_path))


def test_the_lock_is_free_again_once_its_holder_closes(tmp_path):
    path = owner_path("pbd-7xab", str(tmp_path))
    holder = _record(tmp_path, "pbd-7xab")
    other = os.open(path, os.O_RDWR)
    try:
        assert not try_lock(other)
        os.close(holder)
        assert try_lock(other)
    finally:
        os.close(other)
