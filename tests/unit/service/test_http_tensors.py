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
