"""Check an inference request against its model's configuration, Triton's way.

Pure functions: no I/O, no processes. The messages are Triton's (clients and test suites
grep for them), prefixed with ``[request id: <id>]`` where Triton prefixes them.
"""

from __future__ import annotations

import json
import math
from typing import TypeGuard

from pbd.errors import Code, PbdError, invalid_arg
from pbd.memory.client_shm import ClientShmRegistry, CudaRegion
from pbd.modelconfig.model import ModelConfig, TensorConfig
from pbd.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    CudaSlice,
    InferRequest,
    InputTensor,
    ParamValue,
    PreparedInput,
    PreparedRequest,
    ShmSlice,
    Uint64,
)
from pbd_wire import dtypes
from pbd_wire.bytes_input import BytesInputError, check_bytes_input

_NO_BYTES = memoryview(b"")
_ALLOWED_TRITON_KEYS = ("triton_enable_empty_final_response",)
_BOOL_TRITON_KEYS = ("triton_enable_empty_final_response",)
MAX_STRING_SEQUENCE_ID = 128
# Past validation, correlation IDs, priorities and timeouts are uint64 (the worker descriptor).
_UINT64_MAX = 2**64 - 1
_INT64_MAX = 2**63 - 1

# Triton's addition to a shape error when the model batches (core infer_request.cc).
_IMPLICIT_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _shape_text(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _dims_match(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    if got == want:  # the common case, without a generator
        return True
    return len(got) == len(want) and all(w == -1 or g == w for g, w in zip(got, want, strict=True))


def _prepare_input(
    request: InferRequest,
    tensor: InputTensor,
    cfg: TensorConfig,
    config: ModelConfig,
    *,
    nbytes: int | None = None,
) -> PreparedInput:
    """``nbytes`` is given for shared-memory inputs, whose bytes the daemon does not read."""
    rid, model = request.log_id, config.name
    if tensor.datatype != cfg.datatype:
        raise invalid_arg(
            f"[request id: {rid}] inference input '{tensor.name}' data-type is "
            f"'{tensor.datatype}', but model '{model}' expects '{cfg.datatype}'"
        )
    shape = tensor.shape
    if shape and min(shape) < 0:
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
            + (_IMPLICIT_BATCH_NOTE if config.max_batch_size > 0 else "")
        )
    if tensor.data is None:
        raise invalid_arg(
            f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request."
        )
    count = math.prod(shape)
    dt = dtypes.BY_NAME[cfg.datatype]
    nonzero = count or math.prod(d for d in shape if d)  # the product of the nonzero dims
    if nonzero * max(dt.itemsize, 1) > _INT64_MAX:
        # Zero elements, but no array of this shape can exist (numpy: "array is too big").
        raise invalid_arg(
            f"[request id: {rid}] unexpected shape for input '{tensor.name}' for model "
            f"'{model}'. Shape {_shape_text(shape)} exceeds the largest tensor size."
        )
    size = len(tensor.data) if nbytes is None else nbytes
    if dt.is_bytes:
        if nbytes is None:  # in shared memory: the worker checks it (pbd_wire.bytes_input)
            try:
                check_bytes_input(tensor.data, count, tensor.name, model, rid)
            except BytesInputError as exc:
                raise invalid_arg(str(exc)) from None
    elif size != count * dt.itemsize:
        raise invalid_arg(
            f"[request id: {rid}] input byte size mismatch for input '{tensor.name}' for model "
            f"'{model}'. Expected {count * dt.itemsize}, got {size}"
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


def _is_uint64(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _UINT64_MAX


def _parameters(request: InferRequest, prepared: PreparedRequest) -> None:
    custom: dict[str, bool | int | str | float] = {}
    for key, value in request.parameters.items():
        if key == "sequence_id":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected "
                    "int64_param or string_param."
                )
            if isinstance(value, int) and not _is_uint64(value):
                raise invalid_arg(
                    f"invalid value for 'sequence_id' parameter: {value} is not a valid "
                    "correlation ID (0 to 2^64-1)"
                )
            if isinstance(value, str) and len(value) > MAX_STRING_SEQUENCE_ID:
                raise invalid_arg(
                    f"invalid value for 'sequence_id' parameter: a string correlation ID has "
                    f"at most {MAX_STRING_SEQUENCE_ID} characters, got {len(value)}"
                )
            prepared.correlation_id = value
        elif key in ("sequence_start", "sequence_end"):
            if not isinstance(value, bool):
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            if value:
                prepared.flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key == "priority":
            number = value.value if isinstance(value, Uint64) else value
            if not _is_uint64(number):
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected uint64_param."
                )
            prepared.priority = number
        elif key == "timeout":
            if not _is_uint64(value):
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
            if key in _BOOL_TRITON_KEYS and not isinstance(value, bool):
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            prepared.extras[key] = value
        elif isinstance(value, Uint64):
            raise invalid_arg(
                f"invalid value type for parameter '{key}': uint64_param is only accepted for "
                "'priority'"
            )
        else:
            custom[key] = value
    prepared.parameters_json = json.dumps(custom) if custom else "{}"


def prepare_request(
    request: InferRequest, config: ModelConfig, shm: ClientShmRegistry | None = None
) -> PreparedRequest:
    """Validate ``request`` for ``config``; raises PbdError(INVALID_ARG) with Triton's text."""
    rid, model = request.log_id, config.name
    given: dict[str, InputTensor] = {}
    for tensor in request.inputs:
        if config.input(tensor.name) is None:
            raise invalid_arg(
                f"[request id: {rid}] unexpected inference input '{tensor.name}' for model "
                f"'{model}'"
            )
        if tensor.name in given:  # Triton's wording (InferenceRequest::AddOriginalInput)
            raise invalid_arg(f"input '{tensor.name}' already exists in request")
        given[tensor.name] = tensor
    missing = [c.name for c in config.inputs if not c.optional and c.name not in given]
    if missing:
        required = sum(1 for c in config.inputs if not c.optional)
        expected = (
            f"number of inputs between {required} and {len(config.inputs)}"
            if required < len(config.inputs)
            else f"{required} inputs"
        )
        raise invalid_arg(
            f"[request id: {rid}] expected {expected} but got {len(given)} inputs for "
            f"model '{model}'. Got input(s) {sorted(given)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    prepared = PreparedRequest(request, [], [])
    try:
        _prepare_tensors(request, config, prepared, shm)
        _parameters(request, prepared)
    except BaseException:
        release_regions(prepared, shm)
        raise
    return prepared


def _prepare_tensors(
    request: InferRequest,
    config: ModelConfig,
    prepared: PreparedRequest,
    shm: ClientShmRegistry | None,
) -> None:
    rid, model = request.log_id, config.name
    inputs = []
    for tensor in request.inputs:
        cfg = config.input(tensor.name)
        assert cfg is not None
        where = _shm_params(tensor.name, tensor.parameters)
        if where is not None:
            if tensor.data is not None:
                raise invalid_arg(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{tensor.name}' for model '{model}'"
                )
            slice_ = _acquire(shm, prepared, *where)
        elif tensor.device is not None:  # a BLS call's GPU input, in a CUDA pool block
            slice_ = tensor.device
        else:
            checked = _prepare_input(request, tensor, cfg, config)
            # Bytes a front end placed in its arena: described, not copied (data stays, for
            # --max-queued-bytes and BYTES checks, as a view of that arena).
            checked.shm = tensor.placed
            inputs.append(checked)
            continue
        placeholder = InputTensor(tensor.name, tensor.datatype, tensor.shape, _NO_BYTES)
        checked = _prepare_input(request, placeholder, cfg, config, nbytes=slice_.byte_size)
        checked.data, checked.shm = None, slice_
        inputs.append(checked)
    if config.max_batch_size > 0 and len(inputs) > 1:
        batches = {i.shape[0] for i in inputs}
        if len(batches) > 1:
            raise invalid_arg(
                f"[request id: {rid}] input batch sizes differ for model '{model}': "
                f"{sorted(batches)}"
            )
    requested: list[str] = []
    for out in request.outputs:
        where = _shm_params(out.name, out.parameters)
        if config.output(out.name) is None:
            raise invalid_arg(
                f"[request id: {rid}] unexpected inference output '{out.name}' for model '{model}'"
            )
        if "classification" in out.parameters:
            raise PbdError(
                Code.UNSUPPORTED,
                f"output '{out.name}': classification (class_count) is not supported by pbd",
            )
        if where is not None and config.output(out.name) is not None:
            prepared.output_targets[out.name] = _acquire(shm, prepared, *where)
        requested.append(out.name)
    prepared.inputs, prepared.requested_outputs = inputs, requested


def _shm_params(tensor: str, params: dict[str, ParamValue]) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) of a tensor in shared memory, or None; Triton's checks."""
    if not params:  # nearly every tensor: none of the keys below
        return None
    region = params.get("shared_memory_region")
    offset = params.get("shared_memory_offset", 0)
    size = params.get("shared_memory_byte_size")
    if region is None:
        for key in ("shared_memory_offset", "shared_memory_byte_size"):
            if key in params:
                raise invalid_arg(
                    f"'{key}' can not be specified without 'shared_memory_region' parameter "
                    f"for tensor '{tensor}'"
                )
        return None
    if not isinstance(region, str):
        raise invalid_arg(
            "invalid value type for 'shared_memory_region' parameter for tensor "
            f"'{tensor}', expected string_param."
        )
    if size is None:
        raise invalid_arg(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{tensor}'"
        )
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{tensor}', expected "
                "int64_param."
            )
    return region, int(offset), int(size)  # type: ignore[arg-type]


def _acquire(
    shm: ClientShmRegistry | None, prepared: PreparedRequest, region: str, offset: int, size: int
) -> ShmSlice:
    if shm is None:
        raise PbdError(Code.UNSUPPORTED, _SHM_DISABLED)
    held, where = shm.acquire(region, offset, size)
    prepared.regions.append(held)
    if isinstance(held, CudaRegion):
        cuda = CudaSlice(held.device_id, held.raw_handle, held.generation)
        return ShmSlice("", where, size, cuda)
    return ShmSlice(held.worker_name, where, size)


def release_regions(prepared: PreparedRequest, shm: ClientShmRegistry | None) -> None:
    if shm is not None:
        for region in prepared.regions:
            shm.release(region)
    prepared.regions.clear()


_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
