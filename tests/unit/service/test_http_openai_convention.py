"""Which models the OpenAI API serves, the request it sends them, and what it reads back."""

from __future__ import annotations

import json

import numpy as np
from config_samples import ADD_SUB, parse

from pbd.http.openai.convention import build_request, follows_convention, read_response, takes_stop
from pbd.http.openai.requests import Sampling
from pbd.types import InferResult, InputTensor, OutputTensor

TRT_STYLE = parse(
    """
    backend: "python"
    max_batch_size: 8
    input [
      { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
      { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
      { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
      { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
      { name: "random_seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true },
      { name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
      { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
    ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
    """,
    name="trt",
)
VLLM_STYLE = parse(
    """
    backend: "python"
    model_transaction_policy { decoupled: true }
    input [
      { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
      { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] },
      { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
      { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
    ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
    """,
    name="vllm",
)
BARE = parse(
    """
    backend: "python"
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    name="bare",
)
SAMPLING = Sampling(max_tokens=4, temperature=0.5, seed=9, stop=("a", "b"), top_p=0.9)


def _values(tensor: InputTensor) -> list[object]:
    assert tensor.data is not None
    raw = bytes(tensor.data)
    if tensor.datatype == "BYTES":
        out, pos = [], 0
        while pos < len(raw):
            size = int.from_bytes(raw[pos : pos + 4], "little")
            out.append(raw[pos + 4 : pos + 4 + size].decode())
            pos += 4 + size
        return out
    numpy = {"BOOL": np.bool_, "INT32": np.int32, "FP32": np.float32, "UINT64": np.uint64}
    return list(np.frombuffer(raw, numpy[tensor.datatype]).tolist())


def test_a_model_is_served_with_a_bytes_text_input_and_text_output() -> None:
    assert follows_convention(TRT_STYLE) and follows_convention(VLLM_STYLE)
    assert follows_convention(BARE)
    assert not follows_convention(parse(ADD_SUB, name="add_sub"))


def test_sampling_goes_to_the_inputs_the_model_has_in_their_datatypes() -> None:
    request = build_request(TRT_STYLE, "hello", SAMPLING, True, "cmpl-1")
    assert (request.model_name, request.model_version, request.id) == ("trt", "", "cmpl-1")
    tensors = {t.name: t for t in request.inputs}
    assert set(tensors) == {
        "text_input", "stream", "max_tokens", "temperature", "random_seed", "stop_words",
        "return_num_output_tokens",
    }  # fmt: skip
    assert tensors["text_input"].shape == (1, 1)  # a batching model: a batch of one
    assert tensors["stop_words"].shape == (1, 2)
    assert _values(tensors["text_input"]) == ["hello"]
    assert _values(tensors["stream"]) == [True]
    assert _values(tensors["max_tokens"]) == [4]
    assert _values(tensors["temperature"]) == [0.5]
    assert _values(tensors["random_seed"]) == [9]
    assert _values(tensors["stop_words"]) == ["a", "b"]
    assert _values(tensors["return_num_output_tokens"]) == [True]
    assert takes_stop(TRT_STYLE)


def test_sampling_parameters_is_the_json_of_what_was_set() -> None:
    request = build_request(VLLM_STYLE, "hi", SAMPLING, False, "x")
    tensors = {t.name: t for t in request.inputs}
    assert set(tensors) == {
        "text_input",
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
    }
    assert json.loads(str(_values(tensors["sampling_parameters"])[0])) == {
        "max_tokens": 4, "temperature": 0.5, "top_p": 0.9, "seed": 9, "stop": ["a", "b"],
    }  # fmt: skip
    assert _values(tensors["stream"]) == [False]
    assert _values(tensors["exclude_input_in_output"]) == [True]
    assert takes_stop(VLLM_STYLE) and not takes_stop(BARE)


def test_a_model_without_sampling_inputs_gets_the_prompt_only() -> None:
    request = build_request(BARE, "hi", SAMPLING, True, "x")
    assert [t.name for t in request.inputs] == ["text_input"]


def _out(name: str, datatype: str, values: list[object]) -> OutputTensor:
    if datatype == "BYTES":
        raw = b"".join(len(v).to_bytes(4, "little") + v for v in (str(x).encode() for x in values))
    else:
        raw = np.asarray(values, {"INT32": np.int32, "UINT32": np.uint32}[datatype]).tobytes()
    return OutputTensor(name, datatype, (len(values),), memoryview(raw))


def test_a_response_gives_its_text_and_the_counts_it_reports() -> None:
    result = InferResult(
        "m", "1", "",
        [_out("text_output", "BYTES", ["a", "b"]), _out("num_input_tokens", "UINT32", [7]),
         _out("num_output_tokens", "INT32", [2]), _out("other", "INT32", [5])],
    )  # fmt: skip
    piece = read_response(result)
    assert (piece.text, piece.input_tokens, piece.output_tokens) == ("ab", 7, 2)
    bare = read_response(InferResult("m", "1", "", [_out("text_output", "BYTES", ["z"])]))
    assert (bare.text, bare.input_tokens, bare.output_tokens) == ("z", None, None)
