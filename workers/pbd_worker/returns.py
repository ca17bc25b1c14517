"""What ``execute`` may return, with Triton's checks and messages.

Decoupled: ``None`` (the model answers through its response senders). Default: a list with one
entry per request: an ``InferenceResponse``, or ``None`` for a request its response sender
answers or the model rescheduled (``pbd_worker.rescheduling``); or ``None`` alone when the
senders answer them all (Triton 24.06+). A returned response counts as a send with the final
flag, so a request that already got its response through the sender cannot get a second one
this way.
"""

from __future__ import annotations

from typing import Any

from pbd_worker.model_api.errors import TritonModelException
from pbd_worker.model_api.helpers import TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response import InferenceResponse
from pbd_worker.rescheduling import rescheduled, returned_for_rescheduled


def check_returned(
    responses: Any, requests: list[InferenceRequest], decoupled: bool, instance_name: str
) -> str | None:
    """What is wrong with ``responses``, else None."""
    if decoupled:
        if responses is None:
            return None
        return (
            f"Python model '{instance_name}' is using the decoupled mode and the execute "
            "function must return None."
        )
    if type(responses) is list and len(responses) == len(requests):
        # Nearly always: a response per request, none rescheduled, no response sender.
        for request, response in zip(requests, responses, strict=True):
            if (
                type(response) is not InferenceResponse
                or request._response_sender is not None
                or request._release_flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
            ):
                break
        else:
            return None
    if responses is None:
        responses = [None] * len(requests)
    problem = check_list(responses, len(requests))
    if problem:
        return problem
    for request, response in zip(requests, responses, strict=True):
        if rescheduled(request):
            if response is not None:
                return returned_for_rescheduled(response)
            continue
        sender = request._response_sender
        if response is None and sender is None:
            return (
                "Expected an 'InferenceResponse' object in the execute function return list, "
                "found type 'NoneType'."
            )
        if response is not None and sender is not None:
            try:
                sender._account_returned(response)
            except TritonModelException as exc:
                return exc.message()
    return None


def check_list(responses: Any, count: int) -> str | None:
    if not isinstance(responses, list | tuple):
        return "Expected a list in the execute return"
    if len(responses) != count:
        return (
            "Number of InferenceResponse objects do not match the number of "
            "InferenceRequest objects. InferenceRequest(s) size is:"
            f"{count}, and InferenceResponse(s) size is:{len(responses)}\n"
        )
    for response in responses:
        if response is not None and not isinstance(response, InferenceResponse):
            return (
                "Expected an 'InferenceResponse' object in the execute function return "
                f"list, found type '{type(response).__name__}'."
            )
    return None
