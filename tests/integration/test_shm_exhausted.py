"""A full shared-memory filesystem fails only the request that needed the space.

The daemon's segments go to a real 8 MiB tmpfs (``--shm-dir``), so a 16 MiB tensor cannot be
placed: posix_fallocate says ENOSPC, the request gets RESOURCE_EXHAUSTED with the sizes and
the fix, and the same daemon keeps serving smaller requests. Needs root to mount the tmpfs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pbd_harness import EXAMPLE_MODELS, DaemonFactory, error_of, infer_input, tmpfs

TMPFS_BYTES = 8 * 1024 * 1024


@pytest.fixture
def tiny_shm(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "shm", TMPFS_BYTES) as mount_point:
        yield mount_point


def test_full_shm_fails_only_the_request_that_needed_it(
    start_daemon: DaemonFactory, tiny_shm: Path
) -> None:
    daemon = start_daemon(
        EXAMPLE_MODELS,
        "--shm-dir",
        str(tiny_shm),
        "--shm-default-byte-size",
        str(1 << 20),
        "--shm-growth-byte-size",
        str(1 << 20),
        settle=["identity_fp32", "add_sub"],
    )
    client = daemon.client()

    def identity(elements: int) -> np.ndarray:
        data = np.arange(elements, dtype=np.float32).reshape(1, elements)
        result = client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])
        out = result.as_numpy("OUTPUT0")
        assert np.array_equal(out, data)
        return out

    identity(1024)
    big = np.zeros((1, 4 * 1024 * 1024), np.float32)  # 16 MiB > the 8 MiB tmpfs
    error = error_of(lambda: client.infer("identity_fp32", [infer_input("INPUT0", big, "FP32")]))
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED", error
    message = error.message()
    assert f"needed {16 * 1024 * 1024} bytes in {tiny_shm}" in message
    assert "bytes are free" in message and "--shm-size" in message
    # Triton's words too, which its QA looks for
    assert "Failed to increase the shared memory pool size for key 'pbdtest" in message
    # Nothing half-made is left behind, and everyone else is still served.
    assert all(os.path.getsize(tiny_shm / n) <= TMPFS_BYTES for n in os.listdir(tiny_shm))
    identity(1024)
    a = np.arange(4, dtype=np.float32)
    result = client.infer(
        "add_sub", [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
    )
    assert result.as_numpy("OUTPUT0").tolist() == [0.0, 2.0, 4.0, 6.0]
    daemon.stop()
    assert os.listdir(tiny_shm) == []
