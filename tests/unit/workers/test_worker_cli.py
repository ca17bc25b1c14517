"""pbd_worker.cli: the scheduling policy a worker puts itself under (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# A thread already running (as numpy's BLAS threads are when the worker starts), the policy
# applied, then a thread started after: the policies of all three, as the kernel reports them.
PROBE = """
import json, os, sys, threading
from pbd_worker.cli import apply_scheduling

seen = {}
release = threading.Event()
def before():
    release.wait()
    seen["before"] = os.sched_getscheduler(0)
early = threading.Thread(target=before)
early.start()
apply_scheduling(sys.argv[1])
release.set()
early.join()
late = threading.Thread(target=lambda: seen.update(after=os.sched_getscheduler(0)))
late.start()
late.join()
seen["main"] = os.sched_getscheduler(0)
print(json.dumps(seen))
"""


def policies(policy: str) -> dict[str, int]:
    """In a child process: the test's own process keeps its policy."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, policy], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_batch_covers_threads_already_running_and_those_started_later() -> None:
    assert policies("batch") == {"before": os.SCHED_BATCH, "after": os.SCHED_BATCH,
                                 "main": os.SCHED_BATCH}  # fmt: skip


@pytest.mark.parametrize("policy", ["normal", ""])
def test_anything_else_leaves_the_worker_as_it_was(policy: str) -> None:
    assert policies(policy) == {"before": os.SCHED_OTHER, "after": os.SCHED_OTHER,
                                "main": os.SCHED_OTHER}  # fmt: skip
