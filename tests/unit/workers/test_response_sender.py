"""The response sender's state machine: Triton's rules and messages, decoupled and default."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from pbd_worker.model_api.response_sender import InferenceResponseSender

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
REFUSED = "Unable to send response. "


def _request():
    return pb_utils.InferenceRequest._from_runtime(
        inputs=[], request_id="r", correlation_id=0, requested_output_names=[], flags=0,
        timeout=0, parameters_json="{}", model_name="m", model_version=1, trace_context=None,
    )  # fmt: skip


def _sender(decoupled):
    sent = []
    request = _request()
    sender = InferenceResponseSender(request, decoupled, lambda r, resp, f: sent.append((resp, f)))
    return sender, sent, request


def _response(value=1):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value]))])


def test_decoupled_sends_many_then_final_alone():
    sender, sent, _ = _sender(decoupled=True)
    first, second = _response(1), _response(2)
    sender.send(first)
    sender.send(second)
    sender.send(flags=FINAL)
    assert sent == [(first, 0), (second, 0), (None, FINAL)]


def test_decoupled_zero_responses_only_the_final_flag():
    sender, sent, _ = _sender(decoupled=True)
    sender.send(flags=FINAL)
    assert sent == [(None, FINAL)]


def test_send_after_final_is_refused():
    sender, sent, _ = _sender(decoupled=True)
    sender.send(_response(), FINAL)
    with pytest.raises(pb_utils.TritonModelException) as caught:
        sender.send(_response())
    assert str(caught.value) == REFUSED + "Response sender has been closed."
    assert len(sent) == 1


@pytest.mark.parametrize("decoupled", [True, False])
def test_unsupported_flag_and_missing_response(decoupled):
    sender, sent, _ = _sender(decoupled)
    with pytest.raises(pb_utils.TritonModelException, match="^Unable to send response. "
                       "Unsupported flag provided.$"):  # fmt: skip
        sender.send(_response(), flags=2)
    with pytest.raises(pb_utils.TritonModelException) as caught:
        sender.send(None, 0)
    assert str(caught.value) == (
        "Inference Response object must be provided when the response flags is set to zero."
    )
    assert sent == []


def test_default_mode_one_response_then_final():
    sender, sent, _ = _sender(decoupled=False)
    response = _response()
    sender.send(response)
    with pytest.raises(pb_utils.TritonModelException) as caught:
        sender.send(_response(2))
    assert str(caught.value) == (
        REFUSED + "Non-decoupled model cannot send more than one response."
    )
    sender.send(flags=FINAL)
    assert sent == [(response, 0), (None, FINAL)]


def test_default_mode_final_before_a_response_is_refused():
    sender, sent, _ = _sender(decoupled=False)
    with pytest.raises(pb_utils.TritonModelException) as caught:
        sender.send(flags=FINAL)
    assert str(caught.value) == (
        REFUSED + "Non-decoupled model cannot send complete final before sending a response."
    )
    sender.send(_response(), FINAL)
    assert len(sent) == 1


def test_a_returned_response_counts_as_a_final_send():
    sender, _, _ = _sender(decoupled=False)
    sender._account_returned(_response())
    assert sender._is_closed
    sender, _, _ = _sender(decoupled=False)
    sender.send(_response())
    with pytest.raises(pb_utils.TritonModelException, match="more than one response"):
        sender._account_returned(_response())


def test_closed_by_the_runtime():
    sender, sent, _ = _sender(decoupled=True)
    sender._close()
    with pytest.raises(pb_utils.TritonModelException, match="has been closed"):
        sender.send(_response())
    assert sent == []


def test_is_cancelled_follows_the_request():
    sender, _, request = _sender(decoupled=True)
    assert sender.is_cancelled() is False
    request._set_cancelled()
    assert sender.is_cancelled() is True and request.is_cancelled() is True


def test_not_a_response_is_a_type_error():
    sender, _, _ = _sender(decoupled=True)
    with pytest.raises(TypeError, match="InferenceResponse"):
        sender.send("text")


def test_only_one_of_many_threads_gets_the_final_send():
    sender, sent, _ = _sender(decoupled=True)
    refused = []

    def close():
        try:
            sender.send(_response(), FINAL)
        except pb_utils.TritonModelException:
            refused.append(1)

    threads = [threading.Thread(target=close) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == 1 and len(refused) == 7
