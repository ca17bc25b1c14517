"""BLS calls that run out of shared memory answer with an error response in Triton's words,
and the next call goes through (Triton's L0_backend_python bls_memory and bls_memory_async).

The daemon's segments go to a real 24 MiB tmpfs (``--shm-dir``). Compared with Triton 2.51 on
the same model in a mount namespace with a 64 MiB /dev/shm: each of exec(), exec(decoupled=True),
async_exec() and async_exec(decoupled=True) returned an error response "Failed to increase the
shared memory pool size for key '...' to N bytes. ..." for a 128 MiB tensor, and the 1 MiB call
after it its input.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pbd_harness import EXAMPLE_MODELS, DaemonFactory, infer_input, make_repository, tmpfs

QA_MODELS = Path(__file__).resolve().parent / "qa_models"
MIB_FP32 = 262144  # FP32 elements in 1 MiB
PHRASE = "Failed to increase the shared memory pool size for key '"


@pytest.fixture
def small_shm(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "shm", 24 << 20) as mount_point:
        yield mount_point


@pytest.mark.parametrize(
    "params",
    [{}, {"decoupled": True}, {"async": True}, {"async": True, "decoupled": True}],
    ids=["exec", "exec-decoupled", "async_exec", "async_exec-decoupled"],
)
def test_a_bls_call_out_of_shared_memory_is_an_error_response(
    start_daemon: DaemonFactory, tmp_path: Path, small_shm: Path, params: dict[str, bool]
) -> None:
    repository = make_repository(
        tmp_path / "models",
        {"bls_memory": QA_MODELS / "bls_memory", "identity_fp32": EXAMPLE_MODELS / "identity_fp32"},
    )
    daemon = start_daemon(
        repository,
        "--shm-dir", str(small_shm),
        "--shm-default-byte-size", str(1 << 20),
        "--shm-growth-byte-size", str(1 << 20),
        settle=["bls_memory", "identity_fp32"],
    )  # fmt: skip
    # 32 MiB cannot be placed by the caller; 16 MiB can, but then not again for the callee
    # (the daemon's copy); 1 MiB calls go through before and after.
    sizes = np.array([1024, 32 * MIB_FP32, 1 * MIB_FP32, 16 * MIB_FP32, MIB_FP32], np.int64)
    result = daemon.client().infer(
        "bls_memory", [infer_input("SIZES", sizes, "INT64")], parameters=params
    )
    errors = [e.decode() for e in result.as_numpy("ERRORS")]
    assert errors[0] == errors[2] == errors[4] == ""
    for failed in (errors[1], errors[3]):
        assert failed.startswith(PHRASE), errors
        assert "bytes are free" in failed and "--shm-size" in failed
