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
