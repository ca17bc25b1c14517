"""A page of cancellation flags the daemon writes and a worker reads without a message.

The worker reads its socket only between batches (one thread, no reader thread handing every
frame to the main thread), so a ``CancelRequests`` frame sent while ``execute()`` runs waits
in the socket. ``InferenceRequest.is_cancelled()`` must see it at once: the daemon also marks
the request here, and the worker looks here.

The page is ``SLOTS`` native-endian uint64 slots in one shared-memory segment per instance
(:mod:`pbd_wire.shm`), created by the daemon and mapped by its worker. Cancelling request ``r``
stores ``r`` in slot ``r % SLOTS``; ``r`` is cancelled while that slot holds ``r``. Request ids
are the daemon's, increasing per connection, so a slot is reused only ``SLOTS`` requests later:
a request still executing then (more than ``SLOTS`` requests behind) loses the flag here, and
learns of the cancellation from the ``CancelRequests`` frame after its batch, as before. An
aligned 8-byte store is atomic on the platforms pbd runs on, so a reader sees the old id or the
new one."""

from __future__ import annotations

from pbd_wire.shm import Segment

SLOTS = 4096
NBYTES = SLOTS * 8


class CancelFlags:
    def __init__(self, segment: Segment) -> None:
        if segment.size < NBYTES:
            raise ValueError(
                f"cancellation page {segment.name!r} has {segment.size} bytes, not {NBYTES}"
            )
        self.segment = segment
        # A memoryview of native uint64 reads a slot as a Python int without numpy's scalar
        # machinery (is_cancelled() is asked for every request).
        self._slots = segment.buffer[:NBYTES].cast("Q")

    @classmethod
    def create(cls, base: str) -> CancelFlags:
        """The daemon's side: a new, zeroed page."""
        return cls(Segment.create(base, NBYTES))

    @classmethod
    def attach(cls, name: str) -> CancelFlags:
        """The worker's side (or a front end's): the daemon's page, by its wire name."""
        return cls(Segment.attach(name))

    @property
    def name(self) -> str:
        return self.segment.name

    def cancel(self, request_id: int) -> None:
        self._slots[request_id % SLOTS] = request_id

    def cancelled(self, request_id: int) -> bool:
        return self._slots[request_id % SLOTS] == request_id

    def close(self) -> None:
        self._slots.release()
        self.segment.close()
