from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from config_samples import parse

from pbd.http.openai.embeddings import (
    build_embedding_request,
    embeddings_answer,
    embeds,
    parse_embeddings,
    read_embeddings,
)
from pbd.http.openai.errors import ApiError
from pbd.types import InferResult, OutputTensor

BATCHING = parse(
    """
    backend: "python"
    max_batch_size: 8
    input [
      { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
      { name: "dimensions" data_type: TYPE_INT64 dims: [ 1 ] optional: true }
    ]
    output [ { name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] } ]
    """,
    name="emb",
)
FLAT = parse(
    """
    backend: "python"
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] } ]
    output [ { name: "embedding" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
    """,
    name="flat",
)
TEXT = parse(
    """
    backend: "python"
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    name="text",
)


def test_which_models_embed() -> None:
    assert embeds(BATCHING) and embeds(FLAT) and not embeds(TEXT)


def test_the_request() -> None:
    asked = parse_embeddings({"model": "emb", "input": ["a", "b"], "dimensions": 3})
    request = build_embedding_request(BATCHING, asked, "id")
    shapes = {t.name: (t.datatype, t.shape) for t in request.inputs}
    assert shapes == {"text_input": ("BYTES", (2, 1)), "dimensions": ("INT64", (2, 1))}
    flat = build_embedding_request(FLAT, parse_embeddings({"model": "f", "input": "a"}), "id")
    assert [(t.name, t.shape) for t in flat.inputs] == [("text_input", (1,))]
    with pytest.raises(ApiError, match="model 'flat' does not support 'dimensions'"):
        build_embedding_request(FLAT, asked, "id")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "a"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["a", ""]}, "input"),
        ({"model": "m", "input": [[1, 2]]}, "input"),
        ({"model": "m", "input": "a", "encoding_format": "hex"}, "encoding_format"),
        ({"model": "m", "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": "a", "dimensions": True}, "dimensions"),
    ],
)
def test_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_embeddings(body)
    assert (info.value.status, info.value.param) == (400, param)


def _result(values: list[float], tokens: list[int] | None = None) -> InferResult:
    outputs = [
        OutputTensor("embedding", "FP32", (len(values),), memoryview(np.float32(values).tobytes()))
    ]
    if tokens is not None:
        raw = np.int32(tokens).tobytes()
        outputs.append(OutputTensor("num_input_tokens", "INT32", (len(tokens),), memoryview(raw)))
    return InferResult("m", "1", "", outputs)


def test_the_answer_in_both_encodings() -> None:
    vectors, tokens = read_embeddings(_result([1, 2, 3, 4], [2, 3]), "m", 2)
    assert [v.tolist() for v in vectors] == [[1, 2], [3, 4]] and tokens == 5
    floats = embeddings_answer("m", vectors, "float", tokens)
    assert floats == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [1.0, 2.0]},
            {"object": "embedding", "index": 1, "embedding": [3.0, 4.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 5, "total_tokens": 5},
    }
    encoded = embeddings_answer("m", vectors, "base64", 0)["data"][1]["embedding"]
    assert np.frombuffer(base64.b64decode(encoded), "<f4").tolist() == [3.0, 4.0]


def test_a_model_that_answers_wrong_is_a_500() -> None:
    with pytest.raises(ApiError, match="3 values for 2 input") as info:
        read_embeddings(_result([1, 2, 3]), "m", 2)
    assert info.value.status == 500
    with pytest.raises(ApiError, match="no output 'embedding'"):
        read_embeddings(InferResult("m", "1", "", []), "m", 1)
