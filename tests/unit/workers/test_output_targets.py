"""pbd_worker.output_targets: an output already in a daemon segment is pointed at, others are
copied into the arena and held; a client region too small gets Triton's message."""

from __future__ import annotations

import numpy as np
import pytest

from pbd_wire import worker_pb2 as wpb
from pbd_wire.cuda import CudaRegions
from pbd_wire.shm import Arena, Block, SegmentMap
from pbd_worker.model_api.tensor import Tensor
from pbd_worker.output_targets import OutputTooLarge, to_arena, to_client


def test_an_input_returned_unchanged_is_pointed_at_not_copied(prefix):
    daemon_side = Arena(prefix + "d", 1 << 16, 1 << 16)
    outputs = Arena(prefix + "w", 1 << 16, 1 << 16)
    block = daemon_side.allocate(16)
    block.view()[:] = np.arange(4, dtype=np.float32).tobytes()
    inputs = SegmentMap(allowed_prefix=prefix)
    view = inputs.view(block.segment.name, block.offset, 16)
    held: list[Block] = []
    in_place = to_arena(Tensor("OUT", np.frombuffer(view, np.float32)), held, inputs, outputs)
    assert (in_place.region, in_place.offset, held) == (block.segment.name, block.offset, [])
    copied = to_arena(Tensor("OUT", np.arange(4, dtype=np.float32)), held, inputs, outputs)
    assert copied.region == held[0].segment.name and copied.nbytes == 16
    assert np.frombuffer(held[0].view(), np.float32).tolist() == [0, 1, 2, 3]
    del view
    inputs.close()
    outputs.close()
    daemon_side.close()


def test_a_client_region_too_small_is_refused_with_tritons_message() -> None:
    target = wpb.OutputTarget(name="OUT", region="r", offset=0, byte_size=8)
    with pytest.raises(OutputTooLarge, match="should be at least 16 bytes to hold the results"):
        to_client(Tensor("OUT", np.zeros(4, np.float32)), target, SegmentMap(), CudaRegions())


def test_an_input_named_in_origins_is_pointed_at_and_described_in_the_given_entry(prefix):
    daemon_side = Arena(prefix + "d", 1 << 16, 1 << 16)
    outputs = Arena(prefix + "w", 1 << 16, 1 << 16)
    block = daemon_side.allocate(16)
    inputs = SegmentMap(allowed_prefix=prefix)
    array = np.frombuffer(inputs.view(block.segment.name, block.offset, 16), np.float32)
    origins = {id(array): (array, block.segment.name, block.offset, 16)}
    response = wpb.Response()
    held: list[Block] = []
    entry = response.outputs.add()
    ref = to_arena(Tensor("OUT", array), held, inputs, outputs, entry, origins)
    assert ref is entry and held == []
    assert (ref.name, ref.datatype, list(ref.shape)) == ("OUT", "FP32", [4])
    assert (ref.region, ref.offset, ref.nbytes) == (block.segment.name, block.offset, 16)
    # Another array (a view of the same bytes, not the one named) is looked up by address.
    half = to_arena(Tensor("OUT", array[:2]), held, inputs, outputs, origins=origins)
    assert (half.region, half.offset, half.nbytes, held) == (
        block.segment.name, block.offset, 8, []
    )  # fmt: skip
    # An origin whose byte count is not the tensor's is not taken for it.
    origins[id(array)] = (array, "elsewhere", 0, 8)
    again = to_arena(Tensor("OUT", array), held, inputs, outputs, origins=origins)
    assert (again.region, again.offset) == (block.segment.name, block.offset)
    del array
    origins.clear()
    inputs.close()
    outputs.close()
    daemon_side.close()
