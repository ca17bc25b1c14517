"""``InferenceResponseSender``: the object ``request.get_response_sender()`` returns.

A state machine with Triton's rules and messages. Decoupled models send any number of
responses, from any thread, before or after ``execute`` returned, and close with the
``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` flag (with or without a last response). In the
default mode a request gets exactly one response: through the sender, or returned from
``execute`` (which counts as a send with the final flag, so mixing both is refused the same
way). Delivery is the runtime's (``deliver(request, response, flags)``); this module only
decides what is allowed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pbd_worker.model_api.errors import TritonModelException
from pbd_worker.model_api.helpers import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from pbd_worker.model_api.response import InferenceResponse

if TYPE_CHECKING:
    from pbd_worker.model_api.request import InferenceRequest

Deliver = Callable[["InferenceRequest", InferenceResponse | None, int], None]


class InferenceResponseSender:
    def __init__(self, request: InferenceRequest, decoupled: bool, deliver: Deliver) -> None:
        self._request = request
        self._decoupled = decoupled
        self._deliver = deliver
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response`` (may be None with the final flag) for this request."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"response must be a pb_utils.InferenceResponse, got {type(response).__name__}"
            )
        self._account(response, flags)
        self._deliver(self._request, response, flags)

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()

    # -- for the runtime -------------------------------------------------------------------------

    def _account(self, response: Any, flags: int) -> None:
        """Check that this send is allowed and count it (Triton's order of checks)."""
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if (
                    response is None
                    and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    and self._sent == 0
                ):
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1

    def _account_returned(self, response: InferenceResponse) -> None:
        """``execute`` returned ``response`` for this request: a send with the final flag."""
        self._account(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _close(self) -> None:
        """No more sends (execute raised, or the request was answered another way)."""
        with self._lock:
            self._closed = True

    @property
    def _is_closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"InferenceResponseSender({self._request.request_id()!r}, {state})"
