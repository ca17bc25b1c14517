"""Sync BLS from processes a model forks (Triton's L0_backend_python bls test_multiprocess:
``multiprocessing.Pool(10).map`` of BLS calls in ``execute()``), through a real daemon.

Every child's call is answered, request after request, and the instance keeps serving.
Triton 2.51 on the same models answered 8 of 11 such requests and hung on the other 3 (its
stub's children block on a lock taken at the fork); pbd relays the children's calls through
the worker (pbd_worker/forked.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pbd_harness import EXAMPLE_MODELS, DaemonFactory, infer_input, make_repository

QA_MODELS = Path(__file__).resolve().parent / "qa_models"


def test_sync_bls_from_a_process_pool_gets_every_answer(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    models = {"bls_multiprocess": QA_MODELS / "bls_multiprocess"}
    models["add_sub"] = EXAMPLE_MODELS / "add_sub"
    daemon = start_daemon(make_repository(tmp_path, models), settle=sorted(models))
    client = daemon.client()
    inputs = [
        infer_input("CALLS", np.array([10], np.int32), "INT32"),
        infer_input("TIMEOUT_S", np.array([60], np.float32), "FP32"),
    ]
    for _ in range(3):
        result = client.infer("bls_multiprocess", inputs, client_timeout=90)
        assert result.as_numpy("OK").tolist() == [1] * 10
    (stats,) = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
    assert int(stats["inference_stats"]["success"]["count"]) == 30
