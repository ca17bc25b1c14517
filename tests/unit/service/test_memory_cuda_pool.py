"""The CUDA memory pool's bookkeeping and its refusals, without a GPU: sizes from Triton's flag,
offsets handed out first fit and aligned as cudaMalloc aligns, exhaustion as RESOURCE_EXHAUSTED,
and a block a BLS call may not name. The device allocation itself is exercised by tests/gpu."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util

import pytest

from pbd.bls.pool import BlsPool
from pbd.errors import Code, PbdError
from pbd.memory.cuda_pool import (
    DEFAULT_POOL_BYTES,
    POOL_ALIGNMENT,
    CudaPools,
    PoolSpace,
    pool_sizes,
)
from pbd.settings import add_arguments, from_args
from pbd_wire import worker_pb2 as wpb

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_sizes_default_per_gpu_and_flag_overrides() -> None:
    assert pool_sizes([], [0, 1]) == {0: DEFAULT_POOL_BYTES, 1: DEFAULT_POOL_BYTES}
    assert pool_sizes(["1:1024", "0:0"], [0, 1]) == {0: 0, 1: 1024}
    for bad in ("1024", "a:1", "0:-1", "0:x"):
        with pytest.raises(ValueError, match="cuda-memory-pool-byte-size"):
            pool_sizes([bad], [0])


def test_a_bad_flag_is_refused_at_start() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--cuda-memory-pool-byte-size", "0-64"])
    with pytest.raises(ValueError, match="expects <gpu>:<bytes>"):
        from_args(args, environ={})


def test_space_is_first_fit_aligned_and_coalesces() -> None:
    space = PoolSpace(4 * POOL_ALIGNMENT)
    a = space.allocate(1)
    b = space.allocate(POOL_ALIGNMENT + 1)  # two aligned units
    assert (a, b) == (0, POOL_ALIGNMENT)
    assert space.used == 3 * POOL_ALIGNMENT
    assert space.allocate(2 * POOL_ALIGNMENT) is None  # one unit left
    space.free(a)
    space.free(b)
    assert space.used == 0
    assert space.allocate(4 * POOL_ALIGNMENT) == 0  # the frees merged back into one
    space.free(12345)  # not a block: ignored


def test_no_pool_on_a_gpu_is_resource_exhausted() -> None:
    pools = CudaPools({0: 0})
    with pytest.raises(PbdError) as info:
        asyncio.run(pools.allocate(0, 16))
    assert info.value.code is Code.RESOURCE_EXHAUSTED
    assert "--cuda-memory-pool-byte-size 0:<bytes>" in info.value.message
    with pytest.raises(PbdError) as unknown:
        asyncio.run(pools.allocate(3, 16))
    assert unknown.value.code is Code.RESOURCE_EXHAUSTED


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_without_cupy_a_pool_is_refused_with_what_to_install() -> None:
    pools = CudaPools({0: 1024})
    with pytest.raises(PbdError) as info:
        asyncio.run(pools.allocate(0, 16))
    assert info.value.code is Code.UNSUPPORTED and "pbd[gpu]" in info.value.message
    assert pools.pools == {}


def test_a_call_may_not_name_a_block_it_was_not_given() -> None:
    pool = BlsPool(CudaPools({0: 1024}))
    ref = wpb.TensorRef(name="IN", datatype="FP32", shape=[4], offset=0, nbytes=16)
    ref.cuda.device_id, ref.cuda.generation = 0, 1
    with pytest.raises(PbdError) as info:
        pool.input_slice(object(), ref)  # type: ignore[arg-type]
    assert info.value.code is Code.INVALID_ARG
    assert "CUDA pool block it was not given" in info.value.message
