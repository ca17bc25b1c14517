"""An instance's shared memory, as the daemon sees it.

The daemon's arena for this worker (request inputs, written once per request) and the map of
the worker's own segments (outputs, read in place). Also the one place that turns tensors into
descriptors and descriptors back into views.
"""

from __future__ import annotations

import numpy as np

from pbd.memory import lent
from pbd.settings import Settings
from pbd.types import LentInputs, OutputTensor, PreparedRequest
from pbd.worker_client.describe import Held, describe_request
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.shm import (
    CANCEL_PAGE,
    INPUT_ARENA,
    OUTPUT_ARENA,
    Arena,
    SegmentMap,
)

_EMPTY = memoryview(b"")
# Every live instance's memory, by segment-name base: a tensor one instance holds may be passed
# to another by name (a BLS reply, an ensemble step's input), and come back as its output.
_LIVE: dict[str, InstanceMemory] = {}


class InstanceMemory:
    def __init__(self, shm_base: str, settings: Settings) -> None:
        self.arena = Arena(
            shm_base + INPUT_ARENA, settings.shm_default_byte_size, settings.shm_growth_byte_size
        )
        self.output_prefix = shm_base + OUTPUT_ARENA
        self.worker_segments = SegmentMap(
            str(settings.shm_dir), allowed_prefix=self.output_prefix
        )
        self._shm_base = shm_base
        self._cancel: CancelFlags | None = None
        _LIVE[shm_base] = self

    @property
    def cancel(self) -> CancelFlags:
        """The instance's cancellation page, created on first use (when its worker starts)."""
        if self._cancel is None:
            self._cancel = CancelFlags.create(self._shm_base + CANCEL_PAGE)
        return self._cancel

    def request_message(
        self, request_id: int, prepared: PreparedRequest, blocks: list[Held], msg: wpb.Request
    ) -> None:
        """Fill ``msg``, the descriptor of one request, its inputs copied into the arena
        (blocks appended, so the caller frees them even when a later allocation fails)."""
        describe_request(request_id, prepared, blocks, msg, self.arena)

    def output(self, ref: wpb.TensorRef, in_client_shm: bool = False) -> OutputTensor:
        """A view of an output; it may point into our own arena (a model returning its input).
        Outputs the worker wrote into a client's region travel as shape and type only."""
        if ref.nbytes == 0 or in_client_shm:
            return OutputTensor(ref.name, ref.datatype, tuple(ref.shape[:]), _EMPTY)
        own = self.arena.find(ref.region)
        if own is not None:
            data = own.view(ref.offset, ref.nbytes)
        elif ref.region.startswith(self.output_prefix):
            data = self.worker_segments.view(ref.region, ref.offset, ref.nbytes)
        else:  # an input in a front end's or another instance's segment, returned in place
            lent_data = lent.view(ref.region, ref.offset, ref.nbytes)
            data = (
                lent_data
                if lent_data is not None
                else _peer_view(ref.region, ref.offset, ref.nbytes)
            )
        shape = tuple(ref.shape[:])  # a slice: protobuf's iterator is slower
        return OutputTensor(ref.name, ref.datatype, shape, data, ref.region, ref.offset)

    def free(self, blocks: list[Held]) -> None:
        for block in blocks:
            if isinstance(block, LentInputs):
                block.give_back()
            elif self.arena.segments:
                self.arena.free(block)
        blocks.clear()

    def close(self) -> None:
        """Unmap everything and let go of this instance's segments (the worker's go with
        the last process that maps them)."""
        _LIVE.pop(self._shm_base, None)
        self.worker_segments.close()
        if self._cancel is not None:
            self._cancel.close()
            self._cancel = None
        self.arena.close()


def locate(data: memoryview) -> tuple[str, int] | None:
    """The segment of any live instance (its arena, or its worker's outputs as far as they
    are mapped) holding ``data``, and the offset there; None if none does."""
    address = int(np.frombuffer(data, np.uint8).__array_interface__["data"][0])
    for memory in _LIVE.values():
        for segment in [*memory.arena.segments, *memory.worker_segments.segments.values()]:
            if segment.address <= address < segment.address + segment.size:
                return segment.name, address - segment.address
    return None


def _peer_view(name: str, offset: int, nbytes: int) -> memoryview:
    """A view of another live instance's segment, through the mapping that instance keeps."""
    owner = next((m for base, m in _LIVE.items() if name.startswith(f"{base}-")), None)
    if owner is None:
        raise ValueError(f"segment {name!r} belongs to no instance")
    own = owner.arena.find(name)
    if own is not None:
        return own.view(offset, nbytes)
    return owner.worker_segments.view(name, offset, nbytes)
