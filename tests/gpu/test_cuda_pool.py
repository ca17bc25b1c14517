"""GPU tensors through the daemon's CUDA memory pool: a BLS call with a GPU input reaches the
callee as a GPU tensor, and a call larger than the pool fails with the pool's message while the
daemon goes on serving."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from gpu_env import GPU_MODELS
from pbd_harness import Daemon, error_of, infer_input, running_daemon

POOL_BYTES = 1 << 20


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running_daemon(
        GPU_MODELS,
        tmp_path_factory.mktemp("pool"),
        "--cuda-memory-pool-byte-size",
        f"0:{POOL_BYTES}",
        settle=["bls_gpu_caller", "gpu_identity"],
    ) as d:
        yield d


def test_bls_gpu_input_goes_through_the_pool(daemon: Daemon) -> None:
    client = daemon.client()
    for n in (1, 1000, POOL_BYTES // 4):  # up to the whole pool, more than once
        data = np.arange(n, dtype=np.float32)
        result = client.infer("bls_gpu_caller", [infer_input("INPUT0", data, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        assert result.as_numpy("CALLEE_ON_CPU").tolist() == [False]


def test_a_call_larger_than_the_pool_is_refused(daemon: Daemon) -> None:
    client = daemon.client()
    big = np.zeros(POOL_BYTES // 4 + 1, dtype=np.float32)
    error = error_of(lambda: client.infer("bls_gpu_caller", [infer_input("INPUT0", big, "FP32")]))
    assert "Failed to allocate memory from CUDA memory pool" in error.message()
    assert "--cuda-memory-pool-byte-size 0:<bytes>" in error.message()
    ok = np.ones(8, dtype=np.float32)
    result = client.infer("bls_gpu_caller", [infer_input("INPUT0", ok, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ok)
