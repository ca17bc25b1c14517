"""The worker's command line: ``python -m pbd_worker --socket S --instance I``; connect to
the daemon (or, as a systemd unit, wait for it) and serve (``pbd_worker.runtime``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import types

from pbd_wire import SCHEDULING_ENV
from pbd_worker import output
from pbd_worker.logconfig import LogConfig
from pbd_worker.logconfig import apply as apply_logging
from pbd_worker.runtime import WorkerRuntime

log = logging.getLogger("pbd_worker")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pbd_worker", description="pbd model-instance worker")
    parser.add_argument("--socket", required=True, help="daemon socket: a path or @abstract-name")
    parser.add_argument("--instance", required=True, help="instance id given by the daemon")
    parser.add_argument(
        "--reconnect-secs",
        type=float,
        default=0.0,
        help="outlive the daemon: reconnect for this long and keep the model (systemd units)",
    )
    opts = parser.parse_args(argv)
    # The model sees the argv of Triton's embedded interpreter ([""]: checked against Triton
    # 2.51's stub), not the worker's flags: a model that runs argparse or unittest.main() in
    # initialize() or execute() must not trip over --socket and --instance.
    sys.argv = [""]
    # Nor pbd_worker's module as __main__: the stub's __main__ is a bare module (no __file__).
    sys.modules["__main__"] = types.ModuleType("__main__")
    # Ctrl-C in a terminal reaches the whole process group; the daemon owns shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    output.install(opts.instance)
    apply_logging(LogConfig(), opts.instance)
    apply_scheduling(os.environ.get(SCHEDULING_ENV, "normal"))
    runtime = WorkerRuntime(opts.socket, opts.instance, opts.reconnect_secs)
    if opts.reconnect_secs:
        # A systemd unit: `systemctl stop` is SIGTERM; finalize the model, then go. (Under the
        # process launcher the daemon finalizes first and SIGTERM keeps its default.)
        def on_term(signum: int, frame: object) -> None:
            if not runtime.finalizing:  # else finalize() hangs: the stop timeout ended it
                runtime.finalize_alone("stopping on SIGTERM")
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
    try:
        runtime.link.connect()
    except OSError as exc:
        if not (opts.reconnect_secs and runtime._reconnect()):
            log.error("cannot connect to the daemon at %s: %s", opts.socket, exc)
            return 2
    try:
        return runtime.serve()
    finally:
        runtime.close()


def apply_scheduling(policy: str) -> None:
    """Put the worker's threads under ``policy``: those running (numpy's BLAS starts some on
    import) and, as threads inherit it, those it starts later.

    ``batch`` is SCHED_BATCH: a fair share of the CPU as at nice 0, but a worker woken by a
    request does not preempt the task on the CPU it wakes on. That task is usually the daemon,
    which has just handed it the request over a Unix socket (a "sync" wakeup, which queues the
    worker on the daemon's CPU): under SCHED_OTHER the worker took the CPU at once and the
    daemon, the one process every request goes through, waited with its other requests.
    No privilege is needed; a kernel that refuses leaves the worker as it was."""
    if policy != "batch":
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), os.SCHED_BATCH, os.sched_param(0))
        except ProcessLookupError:
            continue  # that thread has just ended
        except OSError as exc:
            log.warning("cannot switch to SCHED_BATCH (%s); the worker stays as it was", exc)
            return
