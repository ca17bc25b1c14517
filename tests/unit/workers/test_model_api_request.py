"""InferenceRequest, InferenceResponse, TritonError and the BLS / response-sender hooks."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from pbd_worker.model_api import state


def _runtime_request(**overrides):
    fields = dict(
        inputs=[pb_utils.Tensor("IN", np.zeros(2, dtype=np.float32))],
        request_id="req-1",
        correlation_id=7,
        requested_output_names=["OUT0", "OUT1"],
        flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=1500,
        parameters_json='{"temperature": "hot", "n": 3}',
        model_name="m",
        model_version=2,
        trace_context="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    fields.update(overrides)
    return pb_utils.InferenceRequest._from_runtime(**fields)


def test_runtime_request_accessors():
    request = _runtime_request()
    assert [t.name() for t in request.inputs()] == ["IN"]
    assert request.request_id() == "req-1"
    assert request.correlation_id() == 7
    assert request.requested_output_names() == {"OUT0", "OUT1"}
    assert request.flags() == 1
    assert request.timeout() == 1500
    assert json.loads(request.parameters()) == {"temperature": "hot", "n": 3}
    assert request.model_name() == "m"
    assert request.model_version() == 2
    assert request.trace().get_context().startswith("00-0af7")
    assert request.is_cancelled() is False


def test_string_correlation_id_and_missing_trace():
    request = _runtime_request(correlation_id="seq-a", trace_context=None)
    assert request.correlation_id() == "seq-a"
    assert request.trace().get_context() is None


def test_cancellation_flags_and_release_flags():
    request = _runtime_request()
    request._set_cancelled()
    assert request.is_cancelled() is True
    request.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert request.flags() == 2
    assert request._get_release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request._get_release_flags() == 2


def test_bls_constructor_defaults():
    tensor = pb_utils.Tensor("IN", np.ones(3, dtype=np.int32))
    request = pb_utils.InferenceRequest(
        model_name="other", inputs=[tensor], requested_output_names=["OUT"]
    )
    assert request.request_id() == ""
    assert request.correlation_id() == 0
    assert request.inputs() == [tensor]
    assert request.requested_output_names() == {"OUT"}
    assert request.model_name() == "other"
    assert request.model_version() == -1
    assert request.flags() == 0
    assert request.timeout() == 0
    assert request.parameters() == "{}"
    assert request.trace().get_context() is None


def test_bls_constructor_takes_every_keyword():
    request = pb_utils.InferenceRequest(
        request_id="r",
        correlation_id="corr",
        inputs=[],
        requested_output_names=[],
        model_name="m",
        model_version=3,
        flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=10,
        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
        trace=pb_utils.InferenceTrace(),
        parameters={"flag": True, "count": 2, "name": "x"},
    )
    assert request.correlation_id() == "corr"
    assert json.loads(request.parameters()) == {"flag": True, "count": 2, "name": "x"}


def bls(**arguments):
    """A BLS request with Triton's required arguments (inputs, requested_output_names,
    model_name) filled in unless given."""
    required = {"inputs": [], "requested_output_names": [], "model_name": "m"}
    return pb_utils.InferenceRequest(**{**required, **arguments})


@pytest.mark.parametrize("required", ["inputs", "requested_output_names", "model_name"])
def test_bls_constructor_needs_tritons_required_arguments(required):
    arguments = {"inputs": [], "requested_output_names": [], "model_name": "m"}
    del arguments[required]
    with pytest.raises(TypeError, match=f"missing required argument '{required}'"):
        pb_utils.InferenceRequest(**arguments)
    with pytest.raises(TypeError, match=f"argument '{required}' must not be None"):
        pb_utils.InferenceRequest(**arguments, **{required: None})


def test_a_none_input_is_a_model_exception_as_in_triton():
    with pytest.raises(pb_utils.TritonModelException, match="Input tensor cannot be None"):
        bls(inputs=[None])
    with pytest.raises(TypeError, match="pb_utils.Tensor"):
        bls(inputs=[np.zeros(1)])


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"f": 1.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        ({"nested": {"a": 1}}, "found type <class 'dict'>"),
        ({"list": [1]}, "found type <class 'list'>"),
        ({1: "a"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        ([("a", 1)], "Expect dict, got <class 'list'>"),
    ],
)
def test_parameters_accept_only_bool_int_str(parameters, message):
    with pytest.raises(pb_utils.TritonModelException) as info:
        bls(parameters=parameters)
    assert message in str(info.value)
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceResponse(parameters=parameters)


@pytest.mark.parametrize("bad", [1.0, -1, 2**64, b"x"])
def test_correlation_id_must_be_integer_or_string(bad):
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID must be integer or"):
        bls(correlation_id=bad)
    with pytest.raises(TypeError, match="'correlation_id' must not be None"):
        bls(correlation_id=None)  # refused by Triton's binding before its own check


def test_inputs_must_be_tensors_and_names_strings():
    with pytest.raises(TypeError, match="pb_utils.Tensor"):
        bls(inputs=[np.zeros(1)])
    with pytest.raises(TypeError, match="not a single string"):
        bls(requested_output_names="OUT")
    with pytest.raises(TypeError, match="requested_output_names entries"):
        bls(requested_output_names=[None])


def test_bls_is_refused_until_the_runtime_provides_it(monkeypatch):
    monkeypatch.setattr(state, "bls_executor", None)
    monkeypatch.setattr(state, "bls_async_executor", None)
    request = bls()
    with pytest.raises(pb_utils.TritonModelException, match="BLS.*not available in this pbd"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="BLS.*not available in this pbd"):
        request.async_exec()


def test_response_sender_is_refused_until_the_runtime_provides_it(monkeypatch):
    monkeypatch.setattr(state, "response_sender_factory", None)
    with pytest.raises(pb_utils.TritonModelException, match="response sender.*not supported"):
        _runtime_request().get_response_sender()


def test_installed_hooks_are_used(monkeypatch):
    calls = []

    def executor(request, decoupled):
        calls.append((request.model_name(), decoupled))
        return pb_utils.InferenceResponse()

    async def async_executor(request, decoupled):
        return executor(request, decoupled)

    monkeypatch.setattr(state, "bls_executor", executor)
    monkeypatch.setattr(state, "bls_async_executor", async_executor)
    monkeypatch.setattr(state, "response_sender_factory", lambda request: object())
    request = bls(model_name="other")
    assert isinstance(request.exec(), pb_utils.InferenceResponse)
    request.exec(decoupled=True)

    async def run():
        return await request.async_exec()

    assert isinstance(asyncio.run(run()), pb_utils.InferenceResponse)
    assert calls == [("other", False), ("other", True), ("other", False)]
    sender = request.get_response_sender()
    assert request.get_response_sender() is sender


def test_response_defaults_and_accessors():
    response = pb_utils.InferenceResponse()
    assert response.output_tensors() == []
    assert response.has_error() is False
    assert response.error() is None
    assert response.parameters() == "{}"
    tensor = pb_utils.Tensor("OUT", np.zeros(1))
    response = pb_utils.InferenceResponse([tensor], parameters={"done": True})
    assert response.output_tensors() == [tensor]
    assert json.loads(response.parameters()) == {"done": True}
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is tensor
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None


def test_response_with_error():
    error = pb_utils.TritonError("no such thing", pb_utils.TritonError.NOT_FOUND)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() is True
    assert response.error() is error
    assert response.error().message() == "no such thing"
    assert response.error().code() == pb_utils.TritonError.NOT_FOUND


def test_response_refuses_what_is_not_a_tensor_or_an_error():
    with pytest.raises(TypeError, match="pb_utils.Tensor"):
        pb_utils.InferenceResponse([np.zeros(1)])
    with pytest.raises(TypeError, match="list of pb_utils.Tensor"):
        pb_utils.InferenceResponse(pb_utils.Tensor("OUT", np.zeros(1)))
    with pytest.raises(TypeError, match="TritonError"):
        pb_utils.InferenceResponse(error="just a string")


def test_triton_error_codes_are_their_names():
    codes = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
             "ALREADY_EXISTS", "CANCELLED"]  # fmt: skip
    for code in codes:
        assert getattr(pb_utils.TritonError, code) == code
        assert pb_utils.TritonError("m", code)._code_name() == code
    assert pb_utils.TritonError("m").code() == pb_utils.TritonError.INTERNAL
    with pytest.raises(TypeError, match="TritonError code must be one of"):
        pb_utils.TritonError("m", 3)


def test_triton_error_can_be_raised_and_model_exception_is_an_exception():
    with pytest.raises(pb_utils.TritonError) as info:
        raise pb_utils.TritonError("bad input", pb_utils.TritonError.INVALID_ARG)
    assert str(info.value) == "bad input"
    assert issubclass(pb_utils.TritonModelException, Exception)
    assert pb_utils.TritonModelException("boom").message() == "boom"


def test_preferred_memory_and_trace():
    memory = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 1)
    assert memory.preferred_memory_type == pb_utils.TRITONSERVER_MEMORY_GPU
    assert memory.preferred_device_id == 1
    assert pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU).preferred_device_id == 0
    with pytest.raises(TypeError):
        pb_utils.PreferredMemory(7)
    assert pb_utils.InferenceTrace("").get_context() is None


def test_string_arguments_take_utf8_bytes_as_tritons_bindings_do():
    # python_backend's BLS example names the model with the bytes of a TYPE_STRING input.
    request = bls(model_name=b"add_sub", request_id=b"r1", requested_output_names=[b"OUT", "OUT2"])
    assert request.model_name() == "add_sub" and request.request_id() == "r1"
    assert set(request.requested_output_names()) == {"OUT", "OUT2"}
    with pytest.raises(TypeError, match="model_name must be str or UTF-8 bytes"):
        bls(model_name=b"\xff")
    with pytest.raises(TypeError, match="model_name must be str or bytes"):
        bls(model_name=1)
