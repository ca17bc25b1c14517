"""Regressions found by tests/fuzz in the HTTP/REST tensor decoding: each malformed body is a
PbdError (HTTP 400), not an exception aiohttp turns into a 500."""

from __future__ import annotations

import json

import pytest

from pbd.errors import Code, PbdError
from pbd.http.tensors import parse_infer_request


def _error(doc: object) -> PbdError:
    with pytest.raises(PbdError) as info:
        parse_infer_request(json.dumps(doc).encode(), None, "m", "")
    assert info.value.code is Code.INVALID_ARG
    return info.value


def test_datatype_must_be_a_string():
    err = _error({"inputs": [{"name": "X", "datatype": [], "shape": [1], "data": [1]}]})
    assert "'datatype' must be a string" in err.message


def test_bytes_element_with_a_lone_surrogate():
    err = _error({"inputs": [{"name": "S", "datatype": "BYTES", "shape": [1], "data": ["\ud800"]}]})
    assert "not valid Unicode" in err.message


def test_json_nested_past_the_recursion_limit():
    depth = 100_000
    body = b'{"inputs": [{"name": "A", "data": ' + b"[" * depth + b"]" * depth + b"}]}"
    with pytest.raises(PbdError, match="failed to parse the request JSON"):
        parse_infer_request(body, None, "m", "")


def test_shape_dimensions_must_fit_int64():
    # An empty tensor passes the size checks, so the dimension reached the worker descriptor.
    shape = [0, 2, 2**64]
    err = _error({"inputs": [{"name": "X", "datatype": "INT32", "shape": shape, "data": []}]})
    assert "'shape' must be a list of int64 integers" in err.message


@pytest.mark.parametrize("key", ["inputs", "outputs"])
def test_inputs_and_outputs_must_be_arrays(key):
    assert f"'{key}' must be a JSON array" in _error({key: 1}).message


# Issue 18, finding 8: what Triton rejects, HTTP does not silently turn into another request.


@pytest.mark.parametrize("value", [{}, 0, None, "x"])
def test_outputs_that_are_not_an_array_are_refused_even_when_falsy(value):
    assert "'outputs' must be a JSON array" in _error({"outputs": value}).message


@pytest.mark.parametrize(
    ("datatype", "data", "wrong"),
    [("INT32", ["7", True], '"7"'), ("INT32", [7, True], "true"), ("INT64", [1.5, 2], "1.5"),
     ("FP32", [1.0, "2"], '"2"'), ("FP32", [False, 1.0], "false"),
     ("FP32", [[1.0], [None]], "null"), ("UINT8", [[1], [{"a": 1}]], '{"a": 1}')],
)  # fmt: skip
def test_json_data_of_another_type_is_not_converted(datatype, data, wrong):
    err = _error({"inputs": [{"name": "X", "datatype": datatype, "shape": [2], "data": data}]})
    assert f"input 'X': 'data' element {wrong} is not valid for {datatype}" in err.message


def test_data_and_binary_data_size_together_are_refused():
    doc = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1],
                       "parameters": {"binary_data_size": 4}}]}  # fmt: skip
    header = json.dumps(doc).encode()
    with pytest.raises(PbdError, match="has both 'data' and binary_data_size"):
        parse_infer_request(header + bytes(4), str(len(header)), "m", "")


def test_a_key_given_twice_is_refused():
    body = b'{"id": "a", "id": "b", "inputs": []}'
    with pytest.raises(PbdError, match="duplicate key 'id'"):
        parse_infer_request(body, None, "m", "")
