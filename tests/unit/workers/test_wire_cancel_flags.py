"""The cancellation page: what the daemon marks, its worker sees, through a real mapping;
slots are reused SLOTS requests later."""

from __future__ import annotations

from pathlib import Path

import pytest

from pbd_wire.cancel_flags import NBYTES, SLOTS, CancelFlags
from pbd_wire.shm import Segment


def test_daemon_marks_worker_sees(tmp_path: Path) -> None:
    daemon = CancelFlags.create("pbdtest-c", str(tmp_path))
    worker = CancelFlags.attach("pbdtest-c", str(tmp_path))
    try:
        assert not worker.cancelled(7)
        daemon.cancel(7)
        assert worker.cancelled(7)
        assert not worker.cancelled(8)
        # The slot of 7 is taken by 7 + SLOTS: 7 no longer reads as cancelled.
        daemon.cancel(7 + SLOTS)
        assert worker.cancelled(7 + SLOTS) and not worker.cancelled(7)
    finally:
        worker.close()
        daemon.close(unlink=True)
    assert not (tmp_path / "pbdtest-c").exists()


def test_a_page_too_small_is_refused(tmp_path: Path) -> None:
    small = Segment.create("pbdtest-small", NBYTES // 2, str(tmp_path))
    try:
        with pytest.raises(ValueError, match="cancellation page"):
            CancelFlags(small)
    finally:
        small.close()
        small.unlink()
