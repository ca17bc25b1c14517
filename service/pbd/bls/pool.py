"""GPU tensors in BLS calls, through the daemon's CUDA memory pools (:mod:`pbd.memory.cuda_pool`).

A calling worker with a GPU input asks for a pool block (``PoolAlloc``), copies the tensor in on
the device and names the block in its ``BlsCall``; the callee's worker gets a GPU tensor over
the block (or one host copy, for a model that takes CPU inputs). Blocks belong to the caller
that was granted them: a call may name only its own, each block is freed when the call that
named it ends, and all of a caller's blocks when it goes away.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from pbd.errors import PbdError, invalid_arg
from pbd.memory.cuda_pool import CudaPools
from pbd.types import CudaSlice, ShmSlice
from pbd_wire import worker_pb2 as wpb

if TYPE_CHECKING:
    from pbd.instance.instance import Instance


class BlsPool:
    def __init__(self, pools: CudaPools) -> None:
        self.pools = pools
        self._granted: dict[Instance, dict[tuple[int, int], int]] = {}  # (device, offset) -> n

    async def grant(self, caller: Instance, ask: wpb.PoolAlloc) -> None:
        """All the blocks asked for, or none (and an error)."""
        reply = wpb.PoolGrant(query=ask.query)
        granted = self._granted.setdefault(caller, {})
        taken: list[tuple[int, int]] = []
        try:
            for device_id, nbytes in zip(ask.device_ids, ask.nbytes, strict=True):
                pool, offset = await self.pools.allocate(device_id, nbytes)
                taken.append((pool.device_id, offset))
                granted[(pool.device_id, offset)] = nbytes
                reply.pools.add(
                    device_id=pool.device_id, ipc_handle=pool.ipc_handle,
                    generation=pool.generation,
                )  # fmt: skip
                reply.offsets.append(offset)
        except (PbdError, ValueError) as exc:
            for where in taken:
                granted.pop(where, None)
                self.pools.free(*where)
            del reply.pools[:], reply.offsets[:]
            error = exc if isinstance(exc, PbdError) else invalid_arg(f"bad PoolAlloc: {exc}")
            reply.error.code, reply.error.message = error.code.value, error.message
        if caller.conn is None:
            self.forget(caller)
            return
        with contextlib.suppress(PbdError, ConnectionError):
            caller.conn.send(wpb.DaemonToWorker(pool_grant=reply))

    def input_slice(self, caller: Instance, ref: wpb.TensorRef) -> ShmSlice:
        """Where a GPU input of ``caller``'s BLS call is: a block it was granted, which the
        input must fit."""
        where = (ref.cuda.device_id, ref.offset)
        granted = self._granted.get(caller, {}).get(where)
        pool = self.pools.pools.get(ref.cuda.device_id)
        if granted is None or pool is None or ref.cuda.generation != pool.generation:
            raise invalid_arg(f"BLS input '{ref.name}' names a CUDA pool block it was not given")
        if ref.nbytes > granted:
            raise invalid_arg(
                f"BLS input '{ref.name}' has {ref.nbytes} bytes, its pool block {granted}"
            )
        cuda = CudaSlice(pool.device_id, pool.ipc_handle, pool.generation)
        return ShmSlice("", ref.offset, ref.nbytes, cuda)

    def call_ended(self, caller: Instance, call: wpb.BlsCall) -> None:
        granted = self._granted.get(caller)
        if not granted:
            return
        for ref in call.request.inputs:
            if ref.HasField("cuda") and granted.pop((ref.cuda.device_id, ref.offset), 0):
                self.pools.free(ref.cuda.device_id, ref.offset)

    def forget(self, caller: Instance) -> None:
        for device_id, offset in self._granted.pop(caller, {}):
            self.pools.free(device_id, offset)
