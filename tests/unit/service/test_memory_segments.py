from __future__ import annotations

import os
import re

from pbd.memory.segments import new_daemon_id, segment_namer


def test_namer_is_unique_per_instance():
    name = segment_namer("pbd", "9xff")
    assert [name(), name()] == ["pbd-9xff-0", "pbd-9xff-1"]


def test_daemon_id_names_the_process_and_differs_per_daemon():
    first, second = new_daemon_id(), new_daemon_id()
    assert re.fullmatch(rf"{os.getpid()}x[0-9a-f]{{6}}", first)
    assert first != second
