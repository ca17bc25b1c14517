"""An instance's requests by id, for what rescheduling does to them: an iterative sequence's
request leaves (it comes back under a new id) with its caller's stream open; any other model's
gets Triton's error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduling_samples import prepared

from pbd.errors import NOT_RESCHEDULABLE, Code, Rescheduled
from pbd.instances.streaming import InstanceStreams
from pbd.streams import ResponseStream


@dataclass
class Owner:
    released: list[int] = field(default_factory=list)
    conn: Any = None

    def release_batch(self, batch_id: int, blocks: list[Any]) -> None:
        self.released.append(batch_id)


def test_an_iterative_sequences_request_leaves_with_its_callers_stream_open() -> None:
    streams = InstanceStreams(Owner())  # type: ignore[arg-type]
    request = prepared(0)
    request.stream = caller = ResponseStream()
    request_id = streams.register(request)
    assert isinstance(streams.rescheduled(request_id, iterative=True), Rescheduled)
    assert len(streams) == 0 and not caller.finished and not caller.closed
    assert streams.register(request) != request_id  # its next round: a new id, same stream


def test_a_rescheduled_request_of_another_model_gets_tritons_error() -> None:
    streams = InstanceStreams(Owner())  # type: ignore[arg-type]
    request_id = streams.register(prepared(0))
    error = streams.rescheduled(request_id, iterative=False)
    assert not isinstance(error, Rescheduled)
    assert (error.code, error.message) == (Code.INTERNAL, NOT_RESCHEDULABLE)
    assert len(streams) == 0
