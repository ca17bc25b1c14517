"""The generate extension's JSON <-> requests and results: Triton 2.51's shape rule, which keys
are inputs and which parameters, the answer's keys and values."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
from config_samples import parse

from pbd.errors import Code, PbdError
from pbd.http.generate_json import (
    encode,
    generate_answer,
    input_shape,
    parse_generate_request,
    tensor_from_json,
)
from pbd.modelconfig.model import ModelConfig
from pbd.types import InferRequest, InferResult, OutputTensor, Uint64
from pbd_wire import dtypes

PROBE = parse(
    """
    backend: "python"
    input [
      { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
      { name: "INTS" data_type: TYPE_INT32 dims: [ -1 ] optional: true },
      { name: "FLAG" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
      { name: "GRID" data_type: TYPE_INT64 dims: [ 2, -1 ] optional: true }
    ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    name="probe",
)
BATCHING = parse(
    """
    backend: "python"
    max_batch_size: 4
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    name="batching",
)


def _error(call: Callable[[], object]) -> PbdError:
    with pytest.raises(PbdError) as info:
        call()
    return info.value


def _parse(doc: object, config: ModelConfig = PROBE) -> InferRequest:
    return parse_generate_request(json.dumps(doc).encode(), config, "probe", "")


# -- shapes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_shape", "count", "shape"),
    [
        ([1], 1, (1,)),
        ([-1], 3, (3,)),
        ([-1], 0, (0,)),
        ([-1, 1], 2, (2, 1)),  # a batching model: the batch takes the elements
        ([2, -1], 6, (2, 3)),
        ([-1, -1], 4, (1, 4)),  # the innermost variable dimension takes them, the rest are 1
        ([2, 3], 6, (2, 3)),
    ],
)
def test_input_shape_follows_tritons_rule(
    model_shape: list[int], count: int, shape: tuple[int, ...]
) -> None:
    assert input_shape("X", model_shape, count) == shape


@pytest.mark.parametrize(("model_shape", "count"), [([1], 2), ([1], 0), ([2, -1], 3), ([2], 1)])
def test_elements_that_do_not_fit_the_shape_are_refused(model_shape: list[int], count: int) -> None:
    error = _error(lambda: input_shape("X", model_shape, count))
    assert error.code is Code.INVALID_ARG
    assert error.message.startswith(
        "The schema can not convert input 'X' to tensor with proper shape"
    )
    assert f"{count} element(s)" in error.message


def test_a_tensor_is_a_scalar_or_a_flat_array_in_the_inputs_datatype() -> None:
    ints = PROBE.input("INTS")
    assert ints is not None
    tensor = tensor_from_json(ints, False, [1, -2])
    assert tensor.shape == (2,) and tensor.datatype == "INT32"
    assert tensor.data is not None
    assert np.frombuffer(tensor.data, np.int32).tolist() == [1, -2]
    nested = _error(lambda: tensor_from_json(ints, False, [[1], [2]]))
    assert "a scalar or a flat array" in nested.message
    wrong = _error(lambda: tensor_from_json(ints, False, "abc"))
    assert "JSON integers only" in wrong.message


# -- requests ------------------------------------------------------------------------------------


def test_keys_naming_inputs_are_inputs_and_the_others_parameters() -> None:
    request = _parse(
        {
            "text_input": "hi",
            "INTS": [1, 2, 3],
            "GRID": [1, 2, 3, 4],
            "id": "abc",
            "extra": 5,
            "parameters": {"FLAG": True, "x": 2.5, "y": "s"},
        }
    )
    assert request.id == "abc"
    shapes = {t.name: t.shape for t in request.inputs}
    assert shapes == {"text_input": (1,), "INTS": (3,), "GRID": (2, 2), "FLAG": (1,)}
    # As in Triton, "id" is a parameter as well (it names no input).
    assert request.parameters == {"id": "abc", "extra": 5, "x": 2.5, "y": "s"}


def test_a_batching_models_inputs_get_the_batch_dimension() -> None:
    request = _parse({"text_input": ["a", "b"]}, BATCHING)
    assert [t.shape for t in request.inputs] == [(2, 1)]


def test_a_later_parameter_wins_an_input_given_twice_is_refused() -> None:
    request = _parse({"parameters": {"p": 1}, "p": 2, "text_input": "x"})
    assert request.parameters == {"p": 2}
    twice = _error(lambda: _parse({"text_input": "x", "parameters": {"text_input": "y"}}))
    assert twice.message == (
        "Converting keyword: 'parameters': [request id: <id_unknown>] input 'text_input' "
        "already exists in request"
    )


def test_a_key_given_twice_in_one_object_as_triton() -> None:
    """JSON allows it; Triton refuses an input given twice and takes a parameter's first."""
    config = PROBE
    twice = _error(
        lambda: parse_generate_request(
            b'{"id": "r1", "text_input": "x", "text_input": "y"}', config, "m", ""
        )
    )
    assert twice.message == "[request id: r1] input 'text_input' already exists in request"
    request = parse_generate_request(
        b'{"text_input": "x", "p": 1, "p": 2, "parameters": {"q": 3, "q": {"a": 1}}}',
        config,
        "m",
        "",
    )
    assert request.parameters == {"p": 1, "q": 3}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "failed to parse the request JSON"),
        (b"[1]", "the request JSON must be an object"),
        (b'{"id": 5}', "Unable to parse 'id'"),
        (b'{"parameters": 5}', "Expected JSON object for keyword: 'parameters'"),
        (b'{"x": null}', "parameter 'x' has invalid type"),
        (b'{"parameters": {"x": [1]}}', "parameter 'x' has invalid type"),
        (b'{"text_input": 5}', "BYTES elements must be JSON strings"),
        (b'{"text_input": ["a", "b"]}', "can not convert input 'text_input'"),
        (b'{"FLAG": 1}', "BOOL elements must be JSON true or false"),
        (b'{"INTS": 99999999999}', "does not fit INT32"),  # Triton 2.51 truncates it
    ],
)
def test_bad_requests_are_invalid_arguments(body: bytes, message: str) -> None:
    error = _error(lambda: parse_generate_request(body, PROBE, "probe", ""))
    assert error.code is Code.INVALID_ARG
    assert message in error.message


def test_a_model_with_an_input_named_parameters_cannot_take_the_parameters_object() -> None:
    config = parse(
        """
        backend: "python"
        input [ { name: "parameters" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
        """
    )
    error = _error(lambda: _parse({"parameters": {"a": 1}}, config))
    assert "'parameters' for nested schema also given as input tensor name" in error.message


# -- answers -------------------------------------------------------------------------------------


def _out(name: str, datatype: str, values: list[object], shape: tuple[int, ...]) -> OutputTensor:
    if datatype == "BYTES":
        raw = b"".join(len(v).to_bytes(4, "little") + v for v in (str(x).encode() for x in values))
    else:
        numpy = dtypes.BY_NAME[datatype].numpy
        assert numpy is not None
        raw = np.asarray(values, dtype=numpy).tobytes()
    return OutputTensor(name, datatype, shape, memoryview(raw))


def test_an_answer_has_sorted_keys_one_element_outputs_as_scalars_arrays_flat() -> None:
    result = InferResult(
        "probe",
        "1",
        "abc",
        [
            _out("text_output", "BYTES", ["héllo"], (1,)),
            _out("GRID_OUT", "INT64", [1, 2, 3, 4], (2, 2)),
            _out("FP_OUT", "FP32", [1.5], (1,)),
            _out("WORDS", "BYTES", ["a", "b"], (2,)),
        ],
        {"p_big": Uint64(2**64 - 1), "p_str": "s"},
    )
    doc = generate_answer(result)
    assert list(doc) == sorted(doc)
    assert doc == {
        "FP_OUT": 1.5,
        "GRID_OUT": [1, 2, 3, 4],
        "WORDS": ["a", "b"],
        "id": "abc",
        "model_name": "probe",
        "model_version": "1",
        "p_big": 2**64 - 1,
        "p_str": "s",
        "text_output": "héllo",
    }
    assert encode(doc).decode().count(" ") == 0  # compact, UTF-8 as it is
    assert "héllo" in encode(doc).decode()


def test_a_name_already_taken_keeps_its_first_value() -> None:
    result = InferResult(
        "probe", "1", "", [_out("model_name", "BYTES", ["x"], (1,)), _out("p", "FP32", [1], (1,))],
        {"p": "param"},
    )  # fmt: skip
    doc = generate_answer(result)
    assert doc == {"model_name": "probe", "model_version": "1", "p": "param"}
    assert "id" not in doc  # no id, no key
