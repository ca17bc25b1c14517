"""The daemon's CUDA memory pools: one device allocation per GPU, shared with workers.

GPU tensors that pass from one worker to another through the daemon (a BLS call's GPU inputs)
go through the pool of their device: the sending worker asks for a block (``PoolAlloc``), gets
its offset and the pool's IPC handle (``PoolGrant``), copies the tensor in, device to device,
and names ``(pool, offset)`` in its message; the receiving worker opens the pool's handle once
(the same cache as clients' CUDA regions: ``pbd_wire.cuda``) and hands its model a GPU
tensor over the block. The daemon sub-allocates by offset (first fit, coalescing, 256-byte
aligned as cudaMalloc is) and frees a block when the message that carried it is done. A pool
is allocated when its device is first asked for a block, so a daemon that moves no GPU
tensors holds no GPU memory and never imports CuPy.

Size per GPU: ``--cuda-memory-pool-byte-size <gpu>:<bytes>`` (Triton's flag; default 64 MiB,
0 disables the pool on that GPU). A request larger than what is free gets RESOURCE_EXHAUSTED
naming the flag.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from pbd.errors import Code, PbdError
from pbd.memory.cuda import CudaUnavailable, import_cupy
from pbd_wire.shm import FreeList

log = logging.getLogger("pbd.memory")

DEFAULT_POOL_BYTES = 64 * 1024 * 1024
POOL_ALIGNMENT = 256
# Pools are named to workers like clients' regions, by a generation, from a range client
# registrations (counted from 1) never reach.
POOL_GENERATION_BASE = 1 << 62


def pool_sizes(specs: list[str], gpus: list[int]) -> dict[int, int]:
    """``<gpu>:<bytes>`` flags over the default for every GPU; raises ValueError."""
    sizes = dict.fromkeys(gpus, DEFAULT_POOL_BYTES)
    for spec in specs:
        device, sep, size = spec.partition(":")
        try:
            if not sep:
                raise ValueError
            gpu, nbytes = int(device), int(size)
        except ValueError:
            raise ValueError(
                f"--cuda-memory-pool-byte-size expects <gpu>:<bytes>, got {spec!r}"
            ) from None
        if nbytes < 0:
            raise ValueError(f"--cuda-memory-pool-byte-size: negative size in {spec!r}")
        sizes[gpu] = nbytes
    return sizes


def _align(n: int) -> int:
    return (max(n, 1) + POOL_ALIGNMENT - 1) & ~(POOL_ALIGNMENT - 1)


class PoolSpace:
    """Offsets in one allocation of ``size`` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = FreeList(size)
        self._taken: dict[int, int] = {}  # offset -> reserved bytes

    @property
    def used(self) -> int:
        return sum(self._taken.values())

    def allocate(self, nbytes: int) -> int | None:
        reserved = _align(nbytes)
        offset = self._free.take(reserved)
        if offset is not None:
            self._taken[offset] = reserved
        return offset

    def free(self, offset: int) -> None:
        reserved = self._taken.pop(offset, None)
        if reserved is not None:
            self._free.give(offset, reserved)


@dataclass
class CudaPool:
    device_id: int
    pointer: int
    ipc_handle: bytes
    space: PoolSpace
    generation: int = field(init=False)

    def __post_init__(self) -> None:
        self.generation = POOL_GENERATION_BASE + self.device_id


class CudaPools:
    def __init__(self, sizes: dict[int, int]) -> None:
        self.sizes = sizes
        self.pools: dict[int, CudaPool] = {}
        self._creating: dict[int, asyncio.Future[CudaPool]] = {}

    async def pool(self, device_id: int) -> CudaPool:
        pool = self.pools.get(device_id)
        if pool is not None:
            return pool
        size = self.sizes.get(device_id, 0)
        if size <= 0:
            raise PbdError(
                Code.RESOURCE_EXHAUSTED,
                f"no CUDA memory pool on GPU {device_id} (--cuda-memory-pool-byte-size "
                f"{device_id}:<bytes> sets one; the GPUs here are {sorted(self.sizes)})",
            )
        creating = self._creating.get(device_id)
        if creating is None:
            creating = self._creating[device_id] = asyncio.ensure_future(
                asyncio.to_thread(self._allocate, device_id, size)
            )
        try:
            pool = await asyncio.shield(creating)
        except CudaUnavailable as exc:
            raise PbdError(Code.UNSUPPORTED, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - CUDA's refusal (out of memory, ...)
            self._creating.pop(device_id, None)
            raise PbdError(
                Code.RESOURCE_EXHAUSTED,
                f"cannot allocate the {size}-byte CUDA memory pool on GPU {device_id}: {exc}",
            ) from None
        self.pools[device_id] = pool
        return pool

    @staticmethod
    def _allocate(device_id: int, size: int) -> CudaPool:
        cupy = import_cupy()
        with cupy.cuda.Device(device_id):
            pointer = int(cupy.cuda.runtime.malloc(size))
            try:
                handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(pointer))
            except BaseException:
                cupy.cuda.runtime.free(pointer)
                raise
        log.info("CUDA memory pool on GPU %d: %d bytes", device_id, size)
        return CudaPool(device_id, pointer, handle, PoolSpace(size))

    async def allocate(self, device_id: int, nbytes: int) -> tuple[CudaPool, int]:
        pool = await self.pool(device_id)
        offset = pool.space.allocate(nbytes)
        if offset is None:
            raise PbdError(
                Code.RESOURCE_EXHAUSTED,
                f"Failed to allocate memory from CUDA memory pool: {nbytes} bytes asked on GPU "
                f"{device_id}, {pool.space.size - pool.space.used} of {pool.space.size} free "
                f"(--cuda-memory-pool-byte-size {device_id}:<bytes> makes it larger)",
            )
        return pool, offset

    def free(self, device_id: int, offset: int) -> None:
        pool = self.pools.get(device_id)
        if pool is not None:
            pool.space.free(offset)

    def close(self) -> None:
        if not self.pools:
            return
        cupy = import_cupy()
        for pool in self.pools.values():
            with cupy.cuda.Device(pool.device_id):
                cupy.cuda.runtime.free(pool.pointer)
        self.pools.clear()
