"""Check an inference request against its model's configuration, Triton's way.

Pure functions: no I/O, no processes. The messages are Triton's (clients and test suites
grep for them), prefixed with ``[request id: <id>]`` where Triton prefixes them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from pbd.errors import Code, PbdError, invalid_arg
from pbd.repository.config import ModelConfig, TensorConfig
from pbd.types import InferRequest, InputTensor, ParamValue, Uint64
from pbd_worker import dtypes

SEQUENCE_START = 1
SEQUENCE_END = 2
_ALLOWED_TRITON_KEYS = ("triton_enable_empty_final_response",)


@dataclass
class PreparedInput:
    name: str
    datatype: str
    shape: tuple[int, ...]  # as the model sees it (after reshape)
    data: memoryview


@dataclass
class PreparedRequest:
    """What the worker needs, already checked."""

    request: InferRequest
    inputs: list[PreparedInput]
    requested_outputs: list[str]
    parameters_json: str = "{}"
    correlation_id: int | str = 0
    flags: int = 0
    priority: int = 0
    timeout_us: int = 0
    extras: dict[str, ParamValue] = field(default_factory=dict)


def _shape_text(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _dims_match(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    return len(got) == len(want) and all(w == -1 or g == w for g, w in zip(got, want, strict=True))


def _check_bytes_elements(tensor: InputTensor, data: memoryview, count: int) -> None:
    pos, seen, end = 0, 0, len(data)
    while pos < end:
        if end - pos < 4:
            raise invalid_arg(
                f"incomplete string length indicator for inference input '{tensor.name}', "
                f"expecting 4 bytes but only {end - pos} bytes available. Please make sure "
                "the string length indicator is in one of the first 4 bytes of the input."
            )
        length = int.from_bytes(data[pos : pos + 4], "little")
        pos += 4
        if end - pos < length:
            raise invalid_arg(
                f"incomplete string for inference input '{tensor.name}', expecting string of "
                f"length {length} but only {end - pos} bytes available"
            )
        pos += length
        seen += 1
    if seen != count:
        raise invalid_arg(
            f"expected {count} string elements for inference input '{tensor.name}', got {seen}"
        )


def _prepare_input(
    request: InferRequest, tensor: InputTensor, cfg: TensorConfig, config: ModelConfig
) -> PreparedInput:
    rid, model = request.log_id, config.name
    if tensor.datatype != cfg.datatype:
        raise invalid_arg(
            f"[request id: {rid}] inference input '{tensor.name}' data-type is "
            f"'{tensor.datatype}', but model '{model}' expects '{cfg.datatype}'"
        )
    shape = tensor.shape
    if any(d < 0 for d in shape):
        raise invalid_arg(
            f"[request id: {rid}] unexpected shape for input '{tensor.name}' for model "
            f"'{model}'. Shape dimensions must be non-negative, got {_shape_text(shape)}."
        )
    batch: tuple[int, ...] = ()
    dims = shape
    if config.max_batch_size > 0:
        if not shape:
            raise invalid_arg(
                f"[request id: {rid}] input '{tensor.name}' has no batch dimension but model "
                f"'{model}' has max_batch_size {config.max_batch_size}"
            )
        batch, dims = shape[:1], shape[1:]
        if batch[0] > config.max_batch_size:
            raise invalid_arg(
                f"[request id: {rid}] inference request batch-size must be <= "
                f"{config.max_batch_size} for '{model}'"
            )
    if not _dims_match(dims, cfg.dims):
        expected = ([-1] if config.max_batch_size > 0 else []) + list(cfg.dims)
        raise invalid_arg(
            f"[request id: {rid}] unexpected shape for input '{tensor.name}' for model "
            f"'{model}'. Expected {_shape_text(expected)}, got {_shape_text(shape)}. "
        )
    if tensor.data is None:
        raise invalid_arg(
            f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request."
        )
    count = math.prod(shape)
    dt = dtypes.BY_NAME[cfg.datatype]
    if dt.is_bytes:
        _check_bytes_elements(tensor, tensor.data, count)
    elif len(tensor.data) != count * dt.itemsize:
        raise invalid_arg(
            f"[request id: {rid}] input byte size mismatch for input '{tensor.name}' for model "
            f"'{model}'. Expected {count * dt.itemsize}, got {len(tensor.data)}"
        )
    model_shape = shape
    if cfg.reshape is not None:
        model_shape = batch + _apply_reshape(dims, cfg.reshape)
    return PreparedInput(tensor.name, tensor.datatype, model_shape, tensor.data)


def _apply_reshape(dims: tuple[int, ...], reshape: tuple[int, ...]) -> tuple[int, ...]:
    if -1 not in reshape:
        return reshape
    known = math.prod(d for d in reshape if d != -1)
    missing = math.prod(dims) // known if known else 0
    return tuple(missing if d == -1 else d for d in reshape)


def _parameters(request: InferRequest, prepared: PreparedRequest) -> None:
    custom: dict[str, bool | int | str | float] = {}
    for key, value in request.parameters.items():
        if key == "sequence_id":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected "
                    "int64_param or string_param."
                )
            prepared.correlation_id = value
        elif key in ("sequence_start", "sequence_end"):
            if not isinstance(value, bool):
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            if value:
                prepared.flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key == "priority":
            number = value.value if isinstance(value, Uint64) else value
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected uint64_param."
                )
            prepared.priority = number
        elif key == "timeout":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid_arg(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            prepared.timeout_us = value
        elif key.startswith("triton_"):
            if key not in _ALLOWED_TRITON_KEYS:
                raise invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                    "the following keys starting with 'triton_' are allowed: "
                    + " ".join(_ALLOWED_TRITON_KEYS)
                )
            prepared.extras[key] = value
        elif isinstance(value, Uint64):
            raise invalid_arg(
                f"invalid value type for parameter '{key}': uint64_param is only accepted for "
                "'priority'"
            )
        else:
            custom[key] = value
    prepared.parameters_json = json.dumps(custom) if custom else "{}"


def prepare_request(request: InferRequest, config: ModelConfig) -> PreparedRequest:
    """Validate ``request`` for ``config``; raises PbdError(INVALID_ARG) with Triton's text."""
    rid, model = request.log_id, config.name
    if any("shared_memory_region" in t.parameters for t in (*request.inputs, *request.outputs)):
        raise PbdError(Code.UNSUPPORTED, _SHM_DISABLED)
    given: dict[str, InputTensor] = {}
    for tensor in request.inputs:
        if config.input(tensor.name) is None:
            raise invalid_arg(
                f"[request id: {rid}] unexpected inference input '{tensor.name}' for model "
                f"'{model}'"
            )
        given[tensor.name] = tensor
    missing = [c.name for c in config.inputs if not c.optional and c.name not in given]
    if missing:
        expected = sum(1 for c in config.inputs if not c.optional)
        raise invalid_arg(
            f"[request id: {rid}] expected {expected} inputs but got {len(given)} inputs for "
            f"model '{model}'. Got input(s) {sorted(given)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    inputs = [_prepare_input(request, t, config.input(t.name), config) for t in request.inputs]  # type: ignore[arg-type]
    if config.max_batch_size > 0 and len(inputs) > 1:
        batches = {i.shape[0] for i in inputs}
        if len(batches) > 1:
            raise invalid_arg(
                f"[request id: {rid}] input batch sizes differ for model '{model}': "
                f"{sorted(batches)}"
            )
    requested: list[str] = []
    for out in request.outputs:
        if config.output(out.name) is None:
            raise invalid_arg(
                f"[request id: {rid}] unexpected inference output '{out.name}' for model '{model}'"
            )
        if "classification" in out.parameters:
            raise PbdError(
                Code.UNSUPPORTED,
                f"output '{out.name}': classification (class_count) is not supported by pbd",
            )
        requested.append(out.name)
    prepared = PreparedRequest(request, inputs, requested)
    _parameters(request, prepared)
    return prepared


_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
