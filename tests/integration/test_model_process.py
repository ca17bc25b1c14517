"""What the model's process looks like to Python, as in Triton's stub (issue 20, item 6): argv and
__main__ as the stub's; cwd is the server's in both. SIGINT differs on purpose: workers ignore it
(Ctrl-C reaches the whole process group, and the daemon owns shutdown). So does the CPU
scheduling policy: SCHED_BATCH unless ``--worker-scheduling normal`` (issue 16)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from pbd_harness import DaemonFactory, infer_input

CONFIG = """
name: "argv_probe"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

# argparse in initialize() exits with status 2 on arguments it does not know: Triton's own QA
# models run argparse / unittest.main() there.
MODEL = """
import argparse
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        argparse.ArgumentParser().parse_args()

    def execute(self, requests):
        main = sys.modules["__main__"]
        seen = {"argv": sys.argv, "main_file": hasattr(main, "__file__"), "main": main.__name__}
        out = np.array([json.dumps(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
"""


def test_the_model_sees_tritons_argv_not_the_workers_flags(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repository = tmp_path / "repository"
    (repository / "argv_probe" / "1").mkdir(parents=True)
    (repository / "argv_probe" / "config.pbtxt").write_text(CONFIG)
    (repository / "argv_probe" / "1" / "model.py").write_text(MODEL)
    daemon = start_daemon(repository, settle=["argv_probe"])
    x = infer_input("INPUT0", np.array([1.0], dtype=np.float32), "FP32")
    result = daemon.client().infer("argv_probe", [x])
    seen = json.loads(result.as_numpy("OUTPUT0")[0])
    assert seen["argv"] == [""]
    # __main__ as in the stub: a bare module, not the worker's own code.
    assert seen["main"] == "__main__" and seen["main_file"] is False


SCHED_CONFIG = CONFIG.replace("argv_probe", "sched_probe")

# The policy of the model's own thread and of one it starts in execute().
SCHED_MODEL = """
import json
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        seen = {}
        thread = threading.Thread(target=lambda: seen.update(thread=os.sched_getscheduler(0)))
        thread.start()
        thread.join()
        seen["main"] = os.sched_getscheduler(0)
        out = np.array([json.dumps(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
"""


@pytest.mark.parametrize(
    ("flags", "policy"), [((), os.SCHED_BATCH), (("--worker-scheduling", "normal"), os.SCHED_OTHER)]
)
def test_workers_run_under_the_scheduling_policy_of_worker_scheduling(
    start_daemon: DaemonFactory, tmp_path: Path, flags: tuple[str, ...], policy: int
) -> None:
    """SCHED_BATCH by default (a worker handed a request does not preempt the daemon), for
    the threads the model starts too; ``normal`` leaves workers as any process."""
    repository = tmp_path / "repository"
    (repository / "sched_probe" / "1").mkdir(parents=True)
    (repository / "sched_probe" / "config.pbtxt").write_text(SCHED_CONFIG)
    (repository / "sched_probe" / "1" / "model.py").write_text(SCHED_MODEL)
    daemon = start_daemon(repository, *flags, settle=["sched_probe"])
    x = infer_input("INPUT0", np.array([1.0], dtype=np.float32), "FP32")
    seen = json.loads(daemon.client().infer("sched_probe", [x]).as_numpy("OUTPUT0")[0])
    assert seen == {"main": policy, "thread": policy}
