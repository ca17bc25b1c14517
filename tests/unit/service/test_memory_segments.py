from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pbd.memory.segments import (
    SegmentClaim,
    is_daemon_segment,
    remove_dead_daemons_segments,
    segment_namer,
)
from pbd_wire.shm_owner import owner_path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# Another daemon: claims its segments under a daemon id whose pid is dead *here*, as a daemon
# in another PID namespace looks, makes one segment, and waits to be killed.
_OTHER_DAEMON = """
import sys, time
from collections.abc import Iterator
from pathlib import Path
from pbd.memory.segments import SegmentClaim
shm_dir, daemon_id = sys.argv[1], sys.argv[2]
claim = SegmentClaim("pbd", daemon_id, shm_dir)
(Path(shm_dir) / f"pbd-{daemon_id}-0-d0").write_bytes(b"x")
print("ready", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def _other_daemon(shm_dir: Path, daemon_id: str) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", _OTHER_DAEMON, str(shm_dir), daemon_id],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            yield proc
        finally:
            proc.kill()


def test_segments_of_a_live_daemon_stay_whatever_its_pid_says(tmp_path):
    other = f"{_dead_pid()}xab12cd"
    with _other_daemon(tmp_path, other):
        claim = SegmentClaim("pbd", "1xaa", str(tmp_path))
        assert (tmp_path / f"pbd-{other}-0-d0").exists()
        assert Path(owner_path(f"pbd-{other}", str(tmp_path))).exists()
        claim.release()


def test_segments_of_a_killed_daemon_are_swept_with_its_record(tmp_path, caplog):
    other = f"{_dead_pid()}xab12cd"
    with _other_daemon(tmp_path, other) as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (tmp_path / "pbdother-5x1-0-d0").write_bytes(b"x")
    (tmp_path / "unrelated").write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="pbd.memory"):
        removed = remove_dead_daemons_segments("pbd", str(tmp_path))
    assert removed == [f"pbd-{other}-0-d0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pbdother-5x1-0-d0", "unrelated"]
    assert f"daemon {other} (pid " in caplog.text  # who it was, from its record


def test_a_claim_holds_against_another_claim_in_the_same_process(tmp_path):
    """OFD locks conflict between two opens of the record even within one process (a POSIX
    record lock would not, and closing any descriptor of the file would drop it)."""
    first = SegmentClaim("pbd", "1xaa", str(tmp_path))
    (tmp_path / "pbd-1xaa-0-d0").write_bytes(b"x")
    second = SegmentClaim("pbd", "2xbb", str(tmp_path))
    assert (tmp_path / "pbd-1xaa-0-d0").exists()
    first.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pbd-2xbb.owner"]
    second.release()
    assert list(tmp_path.iterdir()) == []


def test_segments_without_an_owner_record_are_left_and_reported(tmp_path, caplog):
    dead = f"{_dead_pid()}xab12cd"
    (tmp_path / f"pbd-{dead}-0-d0").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="pbd.memory"):
        assert remove_dead_daemons_segments("pbd", str(tmp_path)) == []
    assert (tmp_path / f"pbd-{dead}-0-d0").exists()
    assert "without an owner record" in caplog.text


def test_release_removes_own_segments_and_record_only(tmp_path):
    claim = SegmentClaim("pbd", "1xaa", str(tmp_path))
    record = Path(owner_path("pbd-1xaa", str(tmp_path))).read_text()
    assert record.startswith("pid ") and "pid_namespace pid:[" in record
    assert "boot_id " in record
    (tmp_path / "pbd-1xaa-0-d0").write_bytes(b"")
    (tmp_path / "pbd-1xbb-0-d0").write_bytes(b"")
    claim.release()
    claim.release()  # once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pbd-1xbb-0-d0"]


def test_claim_in_a_missing_directory_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        SegmentClaim("pbd", "1xaa", str(tmp_path / "missing"))


def test_owner_records_are_daemon_files():
    assert is_daemon_segment("other-12xab.owner", "pbd")
    assert is_daemon_segment("other-12xab-0-w3", "pbd")
    assert is_daemon_segment("other-12xab-0-c", "pbd")
    assert not is_daemon_segment("other-12xab.ownerx", "pbd")


def test_namer_is_unique_per_instance():
    name = segment_namer("pbd", "9xff")
    assert [name(), name()] == ["pbd-9xff-0", "pbd-9xff-1"]
