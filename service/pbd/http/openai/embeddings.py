"""``POST /v1/embeddings``: which models embed, the request they get and OpenAI's answer.

An embedding model has a BYTES input ``text_input`` and an FP32 output ``embedding``. All the
request's strings go in one request, ``text_input`` of shape ``[N]`` (``[N, 1]`` when the
model batches), and ``embedding`` holds one vector per string, shape ``[N, D]``. ``dimensions``
goes to an integer input ``dimensions`` the model may have (a model without one refuses it);
usage is the model's ``num_input_tokens`` when it reports them (summed), else 0.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pbd.http.generate_json import tensor_from_json
from pbd.http.openai.convention import INPUT_TOKENS, TEXT_INPUT
from pbd.http.openai.errors import ApiError, invalid
from pbd.http.tensors import wire_to_json
from pbd.types import InferRequest, InferResult, InputTensor

if TYPE_CHECKING:
    from pbd.modelconfig.model import ModelConfig

EMBEDDING = "embedding"
DIMENSIONS = "dimensions"
ENCODINGS = ("float", "base64")
MAX_INPUTS = 2048  # OpenAI's limit of strings per request


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    texts: tuple[str, ...]
    encoding: str
    dimensions: int | None


def embeds(config: ModelConfig) -> bool:
    text_in, out = config.input(TEXT_INPUT), config.output(EMBEDDING)
    return (
        text_in is not None
        and text_in.datatype == "BYTES"
        and out is not None
        and out.datatype == "FP32"
    )


def parse_embeddings(body: Mapping[str, Any]) -> EmbeddingRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter", "model")
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if isinstance(texts, list) and texts and all(isinstance(t, int | list) for t in texts):
        raise invalid(
            "'input' as token ids is not supported: pbd passes text to the model (it has no "
            "tokenizer); send strings",
            "input",
        )
    if (
        not isinstance(texts, list)
        or not 1 <= len(texts) <= MAX_INPUTS
        or not all(isinstance(t, str) and t for t in texts)
    ):
        raise invalid(
            f"'input' must be a non-empty string or an array of 1 to {MAX_INPUTS} of them",
            "input",
        )
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise invalid(f"'encoding_format' must be one of {', '.join(ENCODINGS)}", "encoding_format")
    dimensions = body.get(DIMENSIONS)
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise invalid("'dimensions' must be an integer of at least 1", DIMENSIONS)
    return EmbeddingRequest(model, tuple(texts), encoding, dimensions)


def build_embedding_request(
    config: ModelConfig, asked: EmbeddingRequest, request_id: str
) -> InferRequest:
    batching = config.max_batch_size > 0
    text = config.input(TEXT_INPUT)
    assert text is not None  # embeds(config)
    inputs: list[InputTensor] = [tensor_from_json(text, batching, list(asked.texts))]
    if asked.dimensions is not None:
        tensor = config.input(DIMENSIONS)
        if tensor is None:
            raise invalid(
                f"model '{config.name}' does not support 'dimensions' (it has no input "
                f"'{DIMENSIONS}')",
                DIMENSIONS,
            )
        count = len(asked.texts) if batching else 1
        inputs.append(tensor_from_json(tensor, batching, [asked.dimensions] * count))
    return InferRequest(config.name, "", request_id, inputs)


def read_embeddings(result: InferResult, model: str, count: int) -> tuple[list[np.ndarray], int]:
    """The vectors (one per string) and the prompt tokens the model reports (0 if none)."""
    vectors: list[np.ndarray] | None = None
    tokens = 0
    for out in result.outputs:
        if out.name == EMBEDDING:
            flat = np.frombuffer(out.data, dtype="<f4")
            if count == 0 or flat.size % count or flat.size == 0:
                raise _model_error(model, f"{flat.size} values for {count} input(s)")
            vectors = list(flat.reshape(count, -1))
        elif out.name == INPUT_TOKENS:
            tokens = int(sum(int(v) for v in wire_to_json(out)))
    if vectors is None:
        raise _model_error(model, "no output 'embedding'")
    return vectors, tokens


def _model_error(model: str, what: str) -> ApiError:
    return ApiError(
        500, f"model '{model}' answered an embedding request with {what}", type="server_error"
    )


def embeddings_answer(
    model: str, vectors: list[np.ndarray], encoding: str, tokens: int
) -> dict[str, Any]:
    def encoded(vector: np.ndarray) -> Any:
        if encoding == "base64":
            return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        return [float(v) for v in vector]

    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encoded(v)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
