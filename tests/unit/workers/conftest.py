"""Fixtures shared by the worker-side unit tests."""

from __future__ import annotations

import gc
import itertools
import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from pbd_wire import shm
from pbd_worker.ipc.daemon_link import DaemonLink

_addresses = itertools.count()


@pytest.fixture
def prefix() -> Iterator[str]:
    """A segment-name prefix of this test's own; none of its segments is left held after the
    test (they are memfds: a test that forgot to close one fails here)."""
    name = f"pbdtest-{uuid.uuid4().hex[:8]}-"
    yield name
    gc.collect()  # segments of objects the test dropped without closing
    assert list(shm.held_segments(name)) == [], "segments left open"


@pytest.fixture
def linked() -> Iterator[tuple[DaemonLink, socket.socket]]:
    """A worker's DaemonLink connected to a listener of this test's own: (the link, the
    daemon's end of the connection). Both are closed afterwards."""
    address = f"@pbd-test-link-{os.getpid()}-{next(_addresses)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0" + address[1:])
        server.listen(1)
        link = DaemonLink(address, lambda: None)
        link.connect()
        daemon_end, _ = server.accept()
    try:
        yield link, daemon_end
    finally:
        link.disconnect()
        daemon_end.close()
