"""Where a response's output tensors go: straight into the client's registered region (system
or CUDA) when the request aimed them there, else into this instance's arena, or nowhere when
the tensor already lies in one of the daemon's segments (a model that returns an input)."""

from __future__ import annotations

from pbd_wire import worker_pb2 as wpb
from pbd_wire.cuda import CudaRegions
from pbd_wire.shm import Arena, Block, SegmentMap
from pbd_worker.model_api.tensor import Tensor


class OutputTooLarge(Exception):
    """The client's region is smaller than the output (Triton's message)."""


def to_client(
    tensor: Tensor, target: wpb.OutputTarget, inputs: SegmentMap, cuda: CudaRegions
) -> wpb.TensorRef:
    """Write an output straight into the client's registered region."""
    nbytes = tensor._wire_nbytes()
    if nbytes > target.byte_size:
        raise OutputTooLarge(
            f"shared memory size specified with the request for output '{tensor.name()}' "
            f"({target.byte_size} bytes) should be at least {nbytes} bytes to hold the "
            "results"
        )
    if nbytes and target.HasField("cuda"):
        tensor._write_into_device(cuda.bytes_at(target.cuda, target.offset, nbytes))
        cuda.synchronize(target.cuda)
    elif nbytes:
        tensor._write_into(inputs.view(target.region, target.offset, nbytes))
    return wpb.TensorRef(
        name=tensor.name(),
        datatype=tensor._datatype,
        shape=tensor.shape(),
        region=target.region,
        offset=target.offset,
        nbytes=nbytes,
    )


def to_arena(
    tensor: Tensor, held: list[Block], inputs: SegmentMap, outputs: Arena
) -> wpb.TensorRef:
    """An output for the daemon to read: in place when it already lies in a daemon segment,
    else written into a block of ``outputs`` (appended to ``held`` until the daemon frees it)."""
    ref = wpb.TensorRef(name=tensor.name(), datatype=tensor._datatype, shape=tensor.shape())
    nbytes = tensor._wire_nbytes()
    ref.nbytes = nbytes
    if nbytes == 0:
        return ref
    array = tensor._array_or_none()
    if array is not None and array.flags.c_contiguous:
        # In place when it is the daemon's segment; a client's region is not the daemon's
        # to read a reply from (nor stable: it may be unregistered): copied below.
        address = int(array.__array_interface__["data"][0])
        found = inputs.locate(address, nbytes, clients=False)
        if found is not None:
            ref.region, ref.offset = found[0].name, found[1]
            return ref
    block = outputs.allocate(nbytes)
    held.append(block)
    tensor._write_into(block.view())
    ref.region, ref.offset = block.segment.name, block.offset
    return ref
