"""HTTP inference bodies <-> pbd types: JSON tensors and the binary tensor data extension.

A body is JSON, or -- when the ``Inference-Header-Content-Length`` header is present -- that
many bytes of JSON followed by the raw tensors of every input that declares
``binary_data_size``, in input order. Binary inputs stay views of the received body (no copy).
Responses mirror it: outputs asked for as binary go after the JSON, the rest as ``data``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pbd.errors import invalid_arg
from pbd.types import InferRequest, InferResult, InputTensor, OutputTensor, RequestedOutput
from pbd_wire import dtypes

HEADER_LENGTH = "Inference-Header-Content-Length"
_HTTP_ONLY_REQUEST_PARAMS = ("binary_data_output",)
# Shapes are int64 past this point (the protocol's and the worker descriptor's type).
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PARAM_TYPES = (int, float, str)
# The JSON element types a number tensor takes (a bool is an int to isinstance, not to type).
_INTEGERS: frozenset[type] = frozenset({int})
_NUMBERS: frozenset[type] = frozenset({int, float})


@dataclass
class HttpInferRequest:
    request: InferRequest
    binary_outputs: set[str] | None  # None: all outputs binary or not per ``all_binary``
    all_binary: bool


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def json_to_wire(name: str, datatype: str, shape: list[int], data: Any) -> bytes:
    """The wire-form bytes of a JSON ``data`` list (nested or flat, row-major)."""
    dt = dtypes.BY_NAME.get(datatype)
    if dt is None:
        raise invalid_arg(f"invalid datatype '{datatype}' for input '{name}'")
    # The elements' types, taken in C (``map``): a Python loop over a 1 MiB tensor's 262,144
    # numbers, as isinstance checks, cost more than decoding them.
    if isinstance(data, list):
        values = data
        types = set(map(type, data))
        if list in types:  # nested (row-major)
            values = _flatten(data)
            types = set(map(type, values))
    else:
        values, types = [data], {type(data)}
    expected = math.prod(shape)
    if len(values) != expected:
        raise invalid_arg(
            f"unexpected number of elements for input '{name}': shape {shape} needs "
            f"{expected}, 'data' has {len(values)}"
        )
    if dt.is_bytes:
        parts = []
        for v in values:
            if not isinstance(v, str):
                raise invalid_arg(f"input '{name}': BYTES elements must be JSON strings")
            try:
                raw = v.encode()
            except UnicodeEncodeError:  # a lone surrogate, which JSON can spell
                raise invalid_arg(f"input '{name}': a BYTES element is not valid Unicode") from None
            parts.append(len(raw).to_bytes(4, "little") + raw)
        return b"".join(parts)
    if dt.numpy is None:
        raise invalid_arg(
            f"input '{name}': {datatype} cannot be sent as JSON; use the binary data extension"
        )
    if datatype == "BOOL" and not types <= {bool}:
        raise invalid_arg(f"input '{name}': BOOL elements must be JSON true or false")
    # JSON types are not converted: a string or a bool in a number tensor is a client's bug.
    # (The decoder makes exactly int, float, bool, str, list, dict and None.)
    integers = datatype.startswith(("INT", "UINT"))
    allowed = _INTEGERS if integers else _NUMBERS
    if datatype != "BOOL" and not types <= allowed:
        wrong = next(v for v in values if type(v) not in allowed)
        kind = "integers" if integers else "numbers"
        raise invalid_arg(
            f"input '{name}': 'data' element {json.dumps(wrong)} is not valid for {datatype} "
            f"(JSON {kind} only)"
        )
    try:
        return np.asarray(values, dtype=dt.numpy).tobytes()
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid_arg(f"input '{name}': data does not fit {datatype}: {exc}") from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (which one wins differs between parsers)."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        keys = [key for key, _ in pairs]
        twice = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise ValueError(f"duplicate key '{twice}'")
    return doc


# One decoder and one compact encoder for every request: json.loads and json.dumps build a
# new one on each call given options.
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


class Members(list[tuple[str, Any]]):
    """A JSON object as its members in order, a key given twice kept twice."""


_MEMBERS = json.JSONDecoder(object_pairs_hook=Members)


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body's JSON object (a key given twice is refused), as ``json.loads`` reads
    bytes; INVALID_ARG with Triton's words otherwise."""
    doc = _decode(raw, _DECODER)
    if not isinstance(doc, dict):
        raise invalid_arg("the request JSON must be an object")
    return doc


def json_members(raw: bytes) -> Members:
    """A request body's JSON object with every member as given (each object in it a
    ``Members`` too), for a protocol that reads a key given twice (Triton's generate)."""
    doc = _decode(raw, _MEMBERS)
    if not isinstance(doc, Members):
        raise invalid_arg("the request JSON must be an object")
    return doc


def _decode(raw: bytes, decoder: json.JSONDecoder) -> Any:
    try:
        return decoder.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # Recursion: deep nesting
        raise invalid_arg(f"failed to parse the request JSON: {exc}") from None


def _params(value: Any, kind: str = "", name: str = "") -> dict[str, Any]:
    """The parameters of the request (``kind`` ""), or of input or output ``name``."""
    if value is None:
        return {}
    # The message is made only for a refusal: this runs for every tensor of every request.
    where = f"{kind} '{name}'" if kind else "the request"
    if not isinstance(value, dict):
        raise invalid_arg(f"'parameters' of {where} must be a JSON object")
    for key, v in value.items():
        if not isinstance(v, _PARAM_TYPES):  # bool is an int
            raise invalid_arg(f"parameter '{key}' of {where} must be a bool, number or string")
    return dict(value)


def parse_infer_request(
    body: bytes, header_length: str | None, model: str, version: str
) -> HttpInferRequest:
    view = memoryview(body)
    if header_length is not None:
        try:
            split = int(header_length)
        except ValueError:
            raise invalid_arg(f"invalid {HEADER_LENGTH} '{header_length}'") from None
        if not 0 <= split <= len(body):
            raise invalid_arg(
                f"{HEADER_LENGTH} {split} is outside the request body of {len(body)} bytes"
            )
        header, binary = view[:split], view[split:]
    else:
        header, binary = view, view[:0]
    doc = json_object(bytes(header))
    params = _params(doc.get("parameters"))
    all_binary = bool(params.pop("binary_data_output", False))
    for key in _HTTP_ONLY_REQUEST_PARAMS:
        params.pop(key, None)
    inputs: list[InputTensor] = []
    offset = 0
    for key in ("inputs", "outputs"):
        if key in doc and not isinstance(doc[key], list):
            raise invalid_arg(f"'{key}' must be a JSON array")
    for item in doc.get("inputs") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise invalid_arg("each input must be an object with a 'name'")
        name, datatype = item["name"], item.get("datatype", "")
        if not isinstance(datatype, str):
            raise invalid_arg(f"input '{name}': 'datatype' must be a string")
        shape = item.get("shape", [])
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and _INT64_MIN <= d <= _INT64_MAX
            for d in shape
        ):
            raise invalid_arg(f"input '{name}': 'shape' must be a list of int64 integers")
        tparams = _params(item.get("parameters"), "input", name)
        size = tparams.pop("binary_data_size", None)
        data: memoryview | None
        if size is not None and "data" in item:
            raise invalid_arg(
                f"input '{name}': has both 'data' and binary_data_size; send its bytes one way"
            )
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise invalid_arg(f"input '{name}': invalid binary_data_size {size!r}")
            if offset + size > len(binary):
                raise invalid_arg(
                    f"input '{name}': binary_data_size {size} runs past the {len(binary)} bytes "
                    "of binary data in the request"
                )
            data = binary[offset : offset + size]
            offset += size
        elif "data" in item:
            data = memoryview(json_to_wire(name, datatype, shape, item["data"]))
        else:
            data = None
        inputs.append(InputTensor(name, datatype, tuple(shape), data, tparams))
    if offset != len(binary):
        raise invalid_arg(
            f"the request has {len(binary) - offset} bytes of binary data that no input claims"
        )
    outputs: list[RequestedOutput] = []
    binary_outputs: set[str] = set()
    for item in doc.get("outputs") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise invalid_arg("each requested output must be an object with a 'name'")
        oparams = _params(item.get("parameters"), "output", item["name"])
        if oparams.pop("binary_data", all_binary):
            binary_outputs.add(item["name"])
        outputs.append(RequestedOutput(item["name"], oparams))
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg("'id' must be a string")
    request = InferRequest(model, version, request_id, inputs, outputs, params)
    return HttpInferRequest(request, binary_outputs if outputs else None, all_binary)


def wire_to_json(out: OutputTensor) -> list[Any]:
    dt = dtypes.BY_NAME[out.datatype]
    if dt.is_bytes:
        values, data, pos = [], out.data, 0
        while pos + 4 <= len(data):
            n = int.from_bytes(data[pos : pos + 4], "little")
            values.append(bytes(data[pos + 4 : pos + 4 + n]).decode("utf-8", "replace"))
            pos += 4 + n
        return values
    if dt.numpy is None:  # BF16: widen to float32 for JSON
        bits = np.frombuffer(out.data, np.uint16).astype(np.uint32) << 16
        widened: list[Any] = bits.view(np.float32).tolist()
        return widened
    numbers: list[Any] = np.frombuffer(out.data, dt.numpy).tolist()
    return numbers


def build_infer_response(result: InferResult, parsed: HttpInferRequest) -> tuple[bytes, int | None]:
    """``(body, json_length)``; ``json_length`` is None when the body is plain JSON."""
    outputs: list[dict[str, Any]] = []
    binary: list[memoryview] = []
    for out in result.outputs:
        entry: dict[str, Any] = {
            "name": out.name,
            "datatype": out.datatype,
            "shape": list(out.shape),
        }
        wants_binary = (
            parsed.all_binary
            if parsed.binary_outputs is None
            else out.name in parsed.binary_outputs
        )
        if wants_binary:
            entry["parameters"] = {"binary_data_size": len(out.data)}
            binary.append(out.data)
        else:
            entry["data"] = wire_to_json(out)
        outputs.append(entry)
    doc: dict[str, Any] = {
        "model_name": result.model_name,
        "model_version": result.model_version,
        "outputs": outputs,
    }
    if result.id:
        doc["id"] = result.id
    if result.parameters:
        doc["parameters"] = dict(result.parameters)
    header = _COMPACT.encode(doc).encode()
    if not binary:
        return header, None
    return b"".join([header, *binary]), len(header)
