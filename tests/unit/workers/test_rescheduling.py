"""Rescheduled requests in the worker: which requests count as handed back, Triton's refusal
of a response returned for one, and the result entry that tells the daemon."""

from __future__ import annotations

import numpy as np

import triton_python_backend_utils as pb_utils
from pbd_wire import worker_pb2 as wpb
from pbd_worker.live_requests import LiveRequests
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response_sender import InferenceResponseSender
from pbd_worker.rescheduling import rescheduled, unanswered
from pbd_worker.returns import check_returned

RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
ALL = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _request(release_flags: int = ALL) -> InferenceRequest:
    request = InferenceRequest._from_runtime(
        inputs=[], request_id="r", correlation_id=1, requested_output_names=[], flags=0,
        timeout=0, parameters_json="{}", model_name="m", model_version=1, trace_context=None,
    )  # fmt: skip
    request.set_release_flags(release_flags)
    return request


def _response() -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1]))])


def test_only_the_reschedule_flag_alone_hands_a_request_back() -> None:
    assert not rescheduled(_request())
    assert rescheduled(_request(RESCHEDULE))
    assert not rescheduled(_request(RESCHEDULE | ALL))  # python_backend compares exactly


def test_a_request_whose_sender_sent_the_final_flag_is_not_handed_back() -> None:
    request = _request(RESCHEDULE)
    request._response_sender = InferenceResponseSender(request, True, lambda *sent: None)
    request._response_sender.send(_response())
    assert rescheduled(request)
    request._response_sender.send(flags=FINAL)
    assert not rescheduled(request)


def test_a_non_decoupled_model_returns_none_for_a_rescheduled_request() -> None:
    requests = [_request(RESCHEDULE), _request()]
    assert check_returned([None, _response()], requests, False, "m_0") is None
    problem = check_returned([_response(), _response()], requests, False, "m_0")
    assert problem == (
        "Expected a None object in the execute function return list for reschduled request, "
        "found type '<class 'pbd_worker.model_api.response.InferenceResponse'>'."
    )
    # Without the flag, None is still refused (Triton's message).
    refused = check_returned([None, None], requests, False, "m_0")
    assert refused is not None and refused.startswith("Expected an 'InferenceResponse' object")


def test_the_result_entry_says_rescheduled_and_the_request_is_done_here() -> None:
    live = LiveRequests(lambda *sent: None, decoupled=True)
    handed_back, answered_later = _request(RESCHEDULE), _request()
    live.start_batch(
        [1, 2],
        [wpb.Request(request_id=1), wpb.Request(request_id=2)],
        [handed_back, answered_later],
    )
    first = unanswered(1, handed_back, live)
    second = unanswered(2, answered_later, live)
    assert (first.rescheduled, first.streamed) == (True, False)
    assert (second.rescheduled, second.streamed) == (False, True)
    assert sorted(live._live) == [2]  # a response sender may still answer request 2


def test_what_execute_returns_is_checked_alike_in_every_shape() -> None:
    class Subclassed(pb_utils.InferenceResponse):
        pass

    requests = [_request(), _request()]
    assert check_returned([_response(), _response()], requests, False, "m_0") is None
    assert check_returned((_response(), _response()), requests, False, "m_0") is None
    subclassed = Subclassed([pb_utils.Tensor("OUT", np.array([1]))])
    assert check_returned([_response(), subclassed], requests, False, "m_0") is None
    assert check_returned([_response(), "no"], requests, False, "m_0") == (
        "Expected an 'InferenceResponse' object in the execute function return list, "
        "found type 'str'."
    )
    assert check_returned([_response()], requests, False, "m_0") is not None
    # A request its sender answered already cannot get a response returned as well.
    answered = requests[1]
    answered._response_sender = InferenceResponseSender(answered, False, lambda *sent: None)
    answered._response_sender.send(_response(), FINAL)
    problem = check_returned([_response(), _response()], requests, False, "m_0")
    assert problem is not None and problem.startswith("Unable to send response.")
