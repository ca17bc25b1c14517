"""Names of this daemon's shared-memory segments.

Every segment is ``<prefix>-<daemon id>-<instance seq>-<d|w><n>`` (or ``-c``), the daemon id
being ``<pid>x<random>``: the name a memfd shows in ``/proc/<pid>/fd`` and ``/proc/<pid>/maps``
(``/memfd:<name>``), which says whose it is when an operator looks. Segments are anonymous
memory files (``pbd_wire.shm``), so no name can collide with another daemon's and nothing is
left to sweep after a crash: the kernel frees a segment with the last process that holds it.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable


def new_daemon_id() -> str:
    return f"{os.getpid()}x{secrets.token_hex(3)}"


def segment_namer(prefix: str, daemon_id: str) -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}-{daemon_id}-{next(counter)}"
