"""The pure pb_utils helpers and constants, the Logger, and get_model_dir."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tritonclient.utils as tc

import triton_python_backend_utils as pb_utils
from pbd_worker.model_api import state

CONFIG = {
    "name": "m",
    "input": [{"name": "IN0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [
        {"name": "OUT0", "data_type": "TYPE_INT32", "dims": [4]},
        {"name": "OUT1", "data_type": "TYPE_STRING", "dims": [1]},
    ],
}


def test_constants():
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    assert pb_utils.TRITONSERVER_MEMORY_CPU != pb_utils.TRITONSERVER_MEMORY_GPU


def test_get_input_tensor_by_name():
    a = pb_utils.Tensor("A", np.zeros(1))
    b = pb_utils.Tensor("B", np.ones(1))
    request = pb_utils.InferenceRequest(model_name="m", inputs=[a, b], requested_output_names=[])
    assert pb_utils.get_input_tensor_by_name(request, "B") is b
    assert pb_utils.get_input_tensor_by_name(request, "OPTIONAL") is None


def test_config_lookups():
    assert pb_utils.get_input_config_by_name(CONFIG, "IN0")["dims"] == [4]
    assert pb_utils.get_output_config_by_name(CONFIG, "OUT1")["data_type"] == "TYPE_STRING"
    assert pb_utils.get_output_config_by_name(CONFIG, "IN0") is None
    assert pb_utils.get_input_config_by_name({"name": "no_io"}, "IN0") is None


def test_decoupled_policy():
    assert pb_utils.using_decoupled_model_transaction_policy(CONFIG) is False
    decoupled = {**CONFIG, "model_transaction_policy": {"decoupled": True}}
    assert pb_utils.using_decoupled_model_transaction_policy(decoupled) is True
    assert (
        pb_utils.using_decoupled_model_transaction_policy({"model_transaction_policy": {}}) is False
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("TYPE_BOOL", bool),
        ("TYPE_UINT8", np.uint8),
        ("TYPE_UINT16", np.uint16),
        ("TYPE_UINT32", np.uint32),
        ("TYPE_UINT64", np.uint64),
        ("TYPE_INT8", np.int8),
        ("TYPE_INT16", np.int16),
        ("TYPE_INT32", np.int32),
        ("TYPE_INT64", np.int64),
        ("TYPE_FP16", np.float16),
        ("TYPE_FP32", np.float32),
        ("TYPE_FP64", np.float64),
        ("TYPE_STRING", np.object_),
    ],
)
def test_triton_string_to_numpy(name, expected):
    assert pb_utils.triton_string_to_numpy(name) is expected


def test_triton_string_to_numpy_has_no_bf16_as_in_triton():
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")


def test_number_mappings_both_ways():
    expected = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16,
                np.int32, np.int64, np.float16, np.float32, np.float64, np.object_]  # fmt: skip
    for number, np_type in enumerate(expected, start=1):
        assert pb_utils.triton_to_numpy_type(number) is np_type
        assert pb_utils.numpy_to_triton_type(np_type) == number
        assert pb_utils.numpy_to_triton_type(np.dtype(np_type)) == number
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.triton_to_numpy_type(14) is None
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.numpy_to_triton_type(np.str_) is None
    assert pb_utils.numpy_to_triton_type(None) is None


SERIALIZE_CASES = [
    np.array([b"a", b"", b"\x00zero\x00", "é".encode()], dtype=np.object_),
    np.array([["x", "yy"], ["zzz", ""]], dtype=np.object_),
    np.array([b"fixed", b"w"], dtype=np.bytes_),
    np.array([1, 2.5, None], dtype=np.object_),
]


@pytest.mark.parametrize("array", SERIALIZE_CASES, ids=["bytes", "str_2d", "bytes_dtype", "other"])
def test_serialize_matches_tritonclient_and_round_trips(array):
    ours = pb_utils.serialize_byte_tensor(array)
    assert isinstance(ours, bytes)
    theirs = tc.serialize_byte_tensor(array)
    assert ours == theirs.item()
    decoded = pb_utils.deserialize_bytes_tensor(ours)
    assert decoded.dtype == np.object_ and decoded.ndim == 1
    np.testing.assert_array_equal(decoded, tc.deserialize_bytes_tensor(theirs.item()))
    np.testing.assert_array_equal(pb_utils.deserialize_bytes_tensor(theirs), decoded)


def test_serialize_edge_cases_follow_triton():
    assert pb_utils.serialize_byte_tensor(np.empty(0, dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.zeros(2, dtype=np.float32)) is None
    assert pb_utils.deserialize_bytes_tensor(b"").shape == (0,)
    assert pb_utils.deserialize_bytes_tensor(
        np.frombuffer(b"\x01\x00\x00\x00q", np.uint8)
    ).tolist() == [b"q"]


def test_deserialize_reports_malformed_input():
    with pytest.raises(pb_utils.TritonModelException, match="declares 5 bytes but only 1 remain"):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00a")


def test_get_model_dir(monkeypatch):
    monkeypatch.setattr(state, "_model_dir", None)
    with pytest.raises(pb_utils.TritonModelException, match="get_model_dir"):
        pb_utils.get_model_dir()
    state.set_model_dir("/models/add_sub")
    assert pb_utils.get_model_dir() == "/models/add_sub"


def test_logger_writes_through_logging_with_the_callers_line(caplog):
    caplog.set_level(logging.DEBUG, logger="pbd_worker.model")
    pb_utils.Logger.log_info("info line")
    pb_utils.Logger.log_warn("warn line")
    pb_utils.Logger.log_error("error line")
    pb_utils.Logger.log_verbose("verbose line")
    pb_utils.Logger.log("default level")
    pb_utils.Logger.log("explicit", pb_utils.Logger.ERROR)
    pb_utils.Logger.log("verbose again", level=pb_utils.Logger.VERBOSE)
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        ("pbd_worker.model", logging.INFO, "info line"),
        ("pbd_worker.model", logging.WARNING, "warn line"),
        ("pbd_worker.model", logging.ERROR, "error line"),
        ("pbd_worker.model", logging.DEBUG, "verbose line"),
        ("pbd_worker.model", logging.INFO, "default level"),
        ("pbd_worker.model", logging.ERROR, "explicit"),
        ("pbd_worker.model", logging.DEBUG, "verbose again"),
    ]
    assert {r.filename for r in caplog.records} == {"test_model_api_helpers.py"}
    assert pb_utils.Logger.WARNING == pb_utils.Logger.LogLevel.WARNING


def test_logger_does_not_format_the_message(caplog):
    caplog.set_level(logging.INFO, logger="pbd_worker.model")
    pb_utils.Logger.log_info("100% done {x} %s")
    assert caplog.records[0].getMessage() == "100% done {x} %s"


@pytest.mark.parametrize(
    "call",
    [
        lambda: pb_utils.Logger.log("Invalid Level", None),
        lambda: pb_utils.Logger.log("Invalid Level", 1),
        lambda: pb_utils.Logger.log("message", "Invalid Level"),
        lambda: pb_utils.Logger.log_info(None),
        lambda: pb_utils.Logger.log_warn(None),
        lambda: pb_utils.Logger.log_error(123),
        lambda: pb_utils.Logger.log_verbose(None),
    ],
)
def test_logger_takes_a_str_and_a_logger_level_as_tritons_binding(call, caplog):
    with pytest.raises(TypeError):
        call()
    assert caplog.records == []


def test_a_none_output_tensor_is_a_model_exception_as_in_triton():
    with pytest.raises(pb_utils.TritonModelException, match="Output tensor cannot be None"):
        pb_utils.InferenceResponse(output_tensors=[None])
    with pytest.raises(TypeError, match="output_tensors must be a list"):
        pb_utils.InferenceResponse(output_tensors=None)
    error = pb_utils.TritonError("failed")
    assert pb_utils.InferenceResponse(error=error).output_tensors() == []
