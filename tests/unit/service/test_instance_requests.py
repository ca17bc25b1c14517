"""pbd.instance.requests: an instance's requests by id, for what rescheduling and cancelling do
to them: an iterative sequence's request leaves (it comes back under a new id) with its
caller's stream open; any other model's gets Triton's error; a cancelled request is flagged
on the cancellation page and the worker is told."""

from __future__ import annotations

import asyncio
from pathlib import Path

from instance_samples import Parts
from scheduling_samples import prepared

from pbd.errors import NOT_RESCHEDULABLE, Code, PbdError, Rescheduled
from pbd.responses import ResponseStream
from pbd.worker_client.results import FINAL
from pbd_wire import worker_pb2 as wpb


def test_an_iterative_sequences_request_leaves_with_its_callers_stream_open(
    tmp_path: Path,
) -> None:
    parts = Parts(tmp_path)
    requests = parts.requests
    request = prepared(0)
    request.stream = caller = ResponseStream()
    request_id = requests.register(request)
    assert isinstance(requests.rescheduled(request_id, iterative=True), Rescheduled)
    assert len(requests) == 0 and not caller.finished and not caller.closed
    assert requests.register(request) != request_id  # its next round: a new id, same stream
    parts.close()


def test_a_rescheduled_request_of_another_model_gets_tritons_error(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    requests = parts.requests
    request_id = requests.register(prepared(0))
    error = requests.rescheduled(request_id, iterative=False)
    assert not isinstance(error, Rescheduled)
    assert (error.code, error.message) == (Code.INTERNAL, NOT_RESCHEDULABLE)
    assert len(requests) == 0
    parts.close()


def test_a_cancelled_request_is_flagged_and_the_worker_told(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    request = prepared(0)
    request_id = parts.requests.register(request)
    assert request.on_cancel is not None
    request.on_cancel()
    (told,) = parts.told
    assert list(told.cancel.request_ids) == [request_id]
    assert parts.memory.cancel.cancelled(request_id)  # seen at once, even inside execute()
    parts.requests.answered(request_id, PbdError(Code.CANCELLED, "cancelled"))
    request.on_cancel()  # answered: nothing left to cancel
    assert len(parts.told) == 1
    parts.close()


def test_streamed_responses_reach_the_callers_stream(tmp_path: Path) -> None:
    async def scenario() -> None:
        parts = Parts(tmp_path)
        request = prepared(0)
        request.stream = caller = ResponseStream()
        request_id = parts.requests.register(request)
        error = wpb.Response(error=wpb.Error(code="INVALID_ARG", message="bad"))
        parts.requests.on_frame(wpb.StreamedResponse(request_id=request_id, response=error))
        parts.requests.on_frame(wpb.StreamedResponse(request_id=request_id, flags=FINAL))
        assert caller.finished
        items = [item async for item in caller]
        assert [(i.error and i.error.message, i.final) for i in items] == [
            ("bad", False),
            (None, True),
        ]
        parts.close()

    asyncio.run(scenario())
