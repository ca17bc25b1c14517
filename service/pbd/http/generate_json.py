"""Triton's generate extension: its JSON <-> pbd's request and result.

A generate request is one JSON object. Each key that names an input of the model is that
input (a scalar, or a flat array; BYTES as strings); any other key is a request parameter
(a string, number or bool), and so is ``id``, which is the request's id as well. The object
``parameters`` is read the same way, key by key. An input's shape comes from the model's
(``[-1] + dims`` when it batches): the fixed dimensions take their share of the elements from
the innermost out, the innermost variable one takes what remains and any other is 1, as
Triton 2.51's front end does it.

An answer is one JSON object: ``id`` (when the request had one), ``model_name``,
``model_version``, the response's parameters, then each output by name (a one-element output
as that element, any other as a flat array), keys in sorted order, as Triton writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pbd.errors import invalid_arg
from pbd.http.tensors import Members, json_members, json_to_wire, wire_to_json
from pbd.types import InferRequest, InferResult, InputTensor, ParamValue, Uint64

if TYPE_CHECKING:
    from pbd.modelconfig.model import ModelConfig, TensorConfig

PARAMETERS = "parameters"


def input_shape(name: str, model_shape: Sequence[int], count: int) -> tuple[int, ...]:
    """The shape ``count`` elements of input ``name`` take, its model shape being
    ``model_shape`` (``-1``: variable)."""
    shape = list(model_shape)
    left = count
    for dim in reversed(shape):
        if dim == -1:
            continue
        if dim == 0 or left % dim:
            left = -1
            break
        left //= dim
    if left >= 0:
        for i in reversed(range(len(shape))):
            if shape[i] == -1:
                shape[i], left = left, 1
    if left != 1:
        raise invalid_arg(
            f"The schema can not convert input '{name}' to tensor with proper shape: "
            f"{count} element(s) do not fit its shape {list(model_shape)}"
        )
    return tuple(shape)


def tensor_from_json(tensor: TensorConfig, batching: bool, value: Any) -> InputTensor:
    """Input ``tensor`` from a generate request's JSON value (a scalar or a flat array)."""
    values = value if isinstance(value, list) else [value]
    if any(isinstance(v, list | dict) for v in values):
        raise invalid_arg(
            f"input '{tensor.name}': a generate request gives an input as a scalar or a flat array"
        )
    model_shape = [-1, *tensor.dims] if batching else list(tensor.dims)
    shape = input_shape(tensor.name, model_shape, len(values))
    data = json_to_wire(tensor.name, tensor.datatype, list(shape), values)
    return InputTensor(tensor.name, tensor.datatype, shape, memoryview(data))


def _parameter(key: str, value: Any) -> ParamValue:
    if not isinstance(value, bool | int | float | str):
        raise invalid_arg(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )
    return value


def _plain(value: Any) -> Any:
    """A JSON value with its objects as dicts (of a key given twice, the first)."""
    if isinstance(value, Members):
        doc: dict[str, Any] = {}
        for key, inner in value:
            doc.setdefault(key, _plain(inner))
        return doc
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_generate_request(
    body: bytes, config: ModelConfig, model: str, version: str
) -> InferRequest:
    doc = json_members(body)
    request_id = next((value for key, value in doc if key == "id"), "")
    if not isinstance(request_id, str):
        raise invalid_arg("Unable to parse 'id': attempt to access JSON non-string as string")
    batching = config.max_batch_size > 0
    inputs: dict[str, InputTensor] = {}
    params: dict[str, ParamValue] = {}

    def take(key: str, value: Any, nested: bool) -> None:
        tensor = config.input(key)
        if tensor is None:
            params[key] = _parameter(key, _plain(value))  # a later one wins, as in Triton
        elif key in inputs:  # Triton's words (InferenceRequest::AddOriginalInput)
            where = f"Converting keyword: '{PARAMETERS}': " if nested else ""
            raise invalid_arg(
                f"{where}[request id: {request_id or '<id_unknown>'}] input '{key}' already "
                "exists in request"
            )
        else:
            inputs[key] = tensor_from_json(tensor, batching, _plain(value))

    # A parameter given twice in one object: the first counts (Triton reads an object's
    # first member of a name); an input given twice is refused.
    top: set[str] = set()
    for key, value in doc:
        if key != PARAMETERS:
            if key not in top or config.input(key) is not None:
                take(key, value, False)
            top.add(key)
            continue
        if config.input(PARAMETERS) is not None:
            raise invalid_arg(
                f"Keyword '{PARAMETERS}' for nested schema also given as input tensor name"
            )
        if not isinstance(value, Members):
            raise invalid_arg(f"Expected JSON object for keyword: '{PARAMETERS}'")
        seen: set[str] = set()
        for inner, inner_value in value:
            if inner not in seen or config.input(inner) is not None:
                take(inner, inner_value, True)
            seen.add(inner)
    return InferRequest(model, version, request_id, list(inputs.values()), parameters=params)


def generate_answer(result: InferResult) -> dict[str, Any]:
    """The JSON object of one response."""
    entries: dict[str, Any] = {}
    if result.id:
        entries["id"] = result.id
    entries["model_name"] = result.model_name
    entries["model_version"] = result.model_version
    # A name already taken keeps its first value (reserved keys, then parameters, then
    # outputs), as in Triton.
    for key, value in result.parameters.items():
        entries.setdefault(key, value.value if isinstance(value, Uint64) else value)
    for out in result.outputs:
        values = wire_to_json(out)
        entries.setdefault(out.name, values[0] if len(values) == 1 else values)
    return dict(sorted(entries.items()))


def encode(doc: dict[str, Any]) -> bytes:
    """Compact JSON, UTF-8 (Triton does not escape non-ASCII either)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(errors="replace")
