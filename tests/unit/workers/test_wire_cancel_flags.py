"""The cancellation page: what the daemon marks, its worker sees, through a real mapping;
slots are reused SLOTS requests later."""

from __future__ import annotations

import pytest

from pbd_wire.cancel_flags import NBYTES, SLOTS, CancelFlags
from pbd_wire.shm import Segment, held_segments


def test_daemon_marks_worker_sees(prefix: str) -> None:
    daemon = CancelFlags.create(f"{prefix}c")
    worker = CancelFlags.attach(daemon.name)
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
        daemon.close()
    assert list(held_segments(prefix)) == []


def test_a_page_too_small_is_refused(prefix: str) -> None:
    small = Segment.create(f"{prefix}small", NBYTES // 2)
    try:
        with pytest.raises(ValueError, match="cancellation page"):
            CancelFlags(small)
    finally:
        small.close()
