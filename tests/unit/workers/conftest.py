"""Fixtures shared by the worker-side unit tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from pbd_wire import shm


@pytest.fixture
def prefix() -> Iterator[str]:
    """A segment-name prefix of this test's own; its segments are removed afterwards."""
    name = f"pbdtest-{uuid.uuid4().hex[:8]}-"
    yield name
    for leftover in os.listdir(shm.SHM_DIR):
        if leftover.startswith(name):
            os.unlink(os.path.join(shm.SHM_DIR, leftover))
