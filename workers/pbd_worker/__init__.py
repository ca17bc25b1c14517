"""The worker: one process per model instance, running an unmodified Triton Python model.

Private to the worker except for the modules the daemon reuses so that both sides behave the
same: ``notify`` (sd_notify) and ``logconfig`` (Triton's log settings applied to Python
logging, with ``journal``). What crosses the process boundary is ``pbd_wire``; the daemon
imports nothing else of this package (tests/unit/workers/test_worker_is_lean.py checks both).
"""
