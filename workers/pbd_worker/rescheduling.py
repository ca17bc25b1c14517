"""Request rescheduling: ``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``.

A model of an iterative sequence (``sequence_batching { iterative_sequence: true }``) hands a
request back instead of answering it; the daemon's sequence batcher runs it again (same inputs,
same request id and correlation ID, flags 0) until the model releases it without the flag. In
this worker a rescheduled request is over once ``execute`` returned: its ``ExecuteResult``
entry says ``rescheduled`` and the next execution is a new request with a new id.

Triton's rules, as python_backend applies them: the flag counts when it was set before
``execute`` returned; a non-decoupled model returns ``None`` for the request (a response is
refused with Triton's message); a decoupled model sends its responses of this round without
the final flag. A request whose response sender already sent the final flag is answered: its
flag is ignored, so a request cannot run on after its client got the last response.
"""

from __future__ import annotations

from pbd_wire import worker_pb2 as wpb
from pbd_worker.live_requests import LiveRequests
from pbd_worker.model_api.helpers import TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
from pbd_worker.model_api.request import InferenceRequest


def rescheduled(request: InferenceRequest) -> bool:
    """Whether the model handed ``request`` back (python_backend compares the flags exactly)."""
    if request._get_release_flags() != TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
        return False
    sender = request._response_sender
    return sender is None or not sender._is_closed


def returned_for_rescheduled(response: object) -> str:
    """Triton's refusal of a response returned for a rescheduled request (its typo kept)."""
    return (
        "Expected a None object in the execute function return list for reschduled request, "
        f"found type '{type(response)}'."
    )


def unanswered(request_id: int, request: InferenceRequest, live: LiveRequests) -> wpb.Response:
    """The result entry of a request ``execute`` returned no response for: rescheduled (done
    here; the daemon sends it again), or answered by its response sender."""
    if rescheduled(request):
        live.done(request_id)
        return wpb.Response(request_id=request_id, rescheduled=True)
    return wpb.Response(request_id=request_id, streamed=True)
