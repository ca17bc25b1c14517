"""BLS calls that run out of shared memory answer with an error response in Triton's words,
and the next call goes through (Triton's L0_backend_python bls_memory and bls_memory_async).

The daemon runs with a 24 MiB file-size limit (``FileSizeLimitedDaemon``): no segment (a memfd)
of its processes may be bigger, as a pod at its memory limit refuses more. Compared with Triton
2.51 on the same model in a mount namespace with a 64 MiB /dev/shm: each of exec(),
exec(decoupled=True), async_exec() and async_exec(decoupled=True) returned an error response
"Failed to increase the shared memory pool size for key '...' to N bytes. ..." for a 128 MiB
tensor, and the 1 MiB call after it its input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pbd_harness import EXAMPLE_MODELS, FileSizeLimitedDaemon, infer_input, make_repository

QA_MODELS = Path(__file__).resolve().parent / "qa_models"
MIB_FP32 = 262144  # FP32 elements in 1 MiB
PHRASE = "Failed to increase the shared memory pool size for key '"


@pytest.mark.parametrize(
    "params",
    [{}, {"decoupled": True}, {"async": True}, {"async": True, "decoupled": True}],
    ids=["exec", "exec-decoupled", "async_exec", "async_exec-decoupled"],
)
def test_a_bls_call_out_of_shared_memory_is_an_error_response(
    tmp_path: Path, params: dict[str, bool]
) -> None:
    repository = make_repository(
        tmp_path / "models",
        {"bls_memory": QA_MODELS / "bls_memory", "identity_fp32": EXAMPLE_MODELS / "identity_fp32"},
    )
    daemon = FileSizeLimitedDaemon(
        repository,
        tmp_path,
        ("--shm-default-byte-size", str(1 << 20), "--shm-growth-byte-size", str(1 << 20)),
        limit=24 << 20,
    )
    try:
        daemon.start()
        daemon.wait_settled(["bls_memory", "identity_fp32"])
        # 32 MiB cannot be placed; 16 MiB can (by the caller, and again for the callee: the
        # daemon's copy); 1 MiB calls go through before and after.
        sizes = np.array([1024, 32 * MIB_FP32, MIB_FP32, 16 * MIB_FP32, MIB_FP32], np.int64)
        result = daemon.client().infer(
            "bls_memory", [infer_input("SIZES", sizes, "INT64")], parameters=params
        )
        errors = [e.decode() for e in result.as_numpy("ERRORS")]
        assert errors[0] == errors[2] == errors[3] == errors[4] == "", errors
        assert errors[1].startswith(PHRASE), errors
        assert "bytes are available" in errors[1] and "raise the memory limit" in errors[1]
    finally:
        daemon.stop()
