"""Where a response's output tensors go: straight into the client's registered region (system
or CUDA) when the request aimed them there, else into this instance's arena, or nowhere when
the tensor already lies in one of the daemon's segments (a model that returns an input)."""

from __future__ import annotations

import math

import numpy as np

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


# Arrays known to lie in the daemon's segments, by id: the array (so the id is its own), the
# segment's name, the offset in it and the byte count (``BatchExecutor``'s batch inputs).
Origins = dict[int, tuple[np.ndarray, str, int, int]]


def to_arena(
    tensor: Tensor,
    held: list[Block],
    inputs: SegmentMap,
    outputs: Arena,
    into: wpb.TensorRef | None = None,
    origins: Origins | None = None,
) -> wpb.TensorRef:
    """An output for the daemon to read: in place when it already lies in a daemon segment,
    else written into a block of ``outputs`` (appended to ``held`` until the daemon frees it).
    Described in ``into`` (a response's entry) or a new message; ``origins`` may name where
    the tensor's array lies without a look at its address."""
    ref = into if into is not None else wpb.TensorRef()
    dt = tensor._dt
    ref.name = tensor.name()
    ref.datatype = dt.name
    ref.shape.extend(tensor._shape)
    if dt.is_bytes or tensor._device_array is not None:
        nbytes, array = tensor._wire_nbytes(), None
    else:  # _wire_nbytes() and _array_or_none() of a CPU tensor of fixed-size elements
        nbytes, array = math.prod(tensor._shape) * dt.itemsize, tensor._array
    ref.nbytes = nbytes
    if nbytes == 0:
        return ref
    if origins is not None and array is not None:
        origin = origins.get(id(array))
        if origin is not None and origin[0] is array and origin[3] == nbytes:
            ref.region, ref.offset = origin[1], origin[2]
            return ref
    # An array numpy allocated (it owns its data) lies in no segment: no look needed.
    if array is not None and not array.flags.owndata and array.flags.c_contiguous:
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
