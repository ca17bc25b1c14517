"""A request as its worker reads it: the ``Request`` descriptor of one request of a batch."""

from __future__ import annotations

from pbd.types import CudaSlice, LentInputs, PreparedRequest
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Arena, Block

# What a batch holds while its worker may read it: its inputs' blocks in the sender's arena,
# and the inputs a front end lent (``LentInputs``: held once per batch).
Held = Block | LentInputs


def _cuda_ref(ref: wpb.CudaRef, where: CudaSlice) -> None:
    ref.device_id, ref.ipc_handle = where.device_id, where.ipc_handle
    ref.generation = where.generation


def describe_request(
    request_id: int,
    prepared: PreparedRequest,
    blocks: list[Held],
    msg: wpb.Request,
    arena: Arena | None,
) -> None:
    """Fill ``msg``, the descriptor of one request: inputs that lie in shared memory already (a
    client's region, a front end's arena) are named where they are, the others copied into
    ``arena`` (their blocks appended, so the caller frees them even when a later allocation
    fails; ValueError without an arena)."""
    msg.request_id = request_id
    request = prepared.request
    if request.id:
        msg.id = request.id
    if prepared.requested_outputs:
        msg.requested_outputs.extend(prepared.requested_outputs)
    if prepared.parameters_json:
        msg.parameters_json = prepared.parameters_json
    if prepared.flags:
        msg.flags = prepared.flags
    if prepared.timeout_us:
        msg.timeout_us = prepared.timeout_us
    if prepared.priority:
        msg.priority = prepared.priority
    if request.bls_call:
        msg.bls_call = request.bls_call
    if isinstance(prepared.correlation_id, str):
        msg.correlation_id_str = prepared.correlation_id
    else:
        msg.correlation_id = prepared.correlation_id
    for name, target in prepared.output_targets.items():
        out = msg.output_targets.add(
            name=name, region=target.region, offset=target.offset, byte_size=target.byte_size
        )
        if target.cuda is not None:
            _cuda_ref(out.cuda, target.cuda)
    if request.lent is not None:  # its placed inputs are read until this batch is freed
        request.lent.hold()
        blocks.append(request.lent)
    for tensor in prepared.inputs:
        ref = msg.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.shm is not None:  # the worker maps the client's region: no copy
            ref.region, ref.offset, ref.nbytes = (
                tensor.shm.region,
                tensor.shm.offset,
                tensor.shm.byte_size,
            )
            if tensor.shm.cuda is not None:
                _cuda_ref(ref.cuda, tensor.shm.cuda)
            continue
        assert tensor.data is not None
        nbytes = len(tensor.data)
        ref.nbytes = nbytes
        if nbytes:
            if arena is None:
                raise ValueError(f"input {tensor.name!r} lies in no shared memory")
            block = arena.allocate(nbytes)
            blocks.append(block)
            block.view()[:] = tensor.data
            ref.region, ref.offset = block.segment.name, block.offset
