"""protobuf <-> pbd types, in one place.

Names are symmetric: ``<thing>_from_pb`` builds a pbd value from a message, ``<thing>_to_pb``
the reverse. Only this module and ``servicer`` import the public-API ``_pb2`` modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from pbd._proto import grpc_service_pb2 as pb
from pbd._proto import model_config_pb2 as mc
from pbd.errors import invalid_arg
from pbd.grpc import wire
from pbd.grpc.protocol import Buffer
from pbd.types import (
    IndexEntry,
    InferRequest,
    InferResult,
    InputTensor,
    ParamValue,
    RequestedOutput,
    Uint64,
)
from pbd_wire import dtypes

# datatype -> (InferTensorContents field, numpy dtype of the wire form)
_CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_ALL_CONTENTS = sorted(set(_CONTENTS_FIELD.values()))


def params_from_pb(params: Mapping[str, pb.InferParameter]) -> dict[str, ParamValue]:
    out: dict[str, ParamValue] = {}
    if not params:  # most requests, inputs and outputs carry none
        return out
    for key in params:  # a upb map: keys then lookups cost a third of items()
        param = params[key]
        which = param.WhichOneof("parameter_choice")
        if which is None:
            raise invalid_arg(f"parameter '{key}' has no value (no *_param field is set)")
        if which == "uint64_param":
            out[key] = Uint64(param.uint64_param)
        else:
            out[key] = getattr(param, which)
    return out


def params_to_pb(values: Mapping[str, ParamValue], target: Any) -> None:
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, Uint64):
            param.uint64_param = value.value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def _contents_to_raw(tensor: Any, model_name: str) -> bytes:
    contents = tensor.contents
    present = [f for f in _ALL_CONTENTS if len(getattr(contents, f))]
    expected = _CONTENTS_FIELD.get(tensor.datatype)
    if present and (expected is None or present != [expected]):
        raise invalid_arg(
            f"unexpected explicit tensor data for input tensor '{tensor.name}' for model "
            f"'{model_name}' of type '{present[0]}', expected datatype '{tensor.datatype}'"
        )
    if expected is None:
        return b""
    values = getattr(contents, expected)
    if tensor.datatype == "BYTES":
        return b"".join(len(v).to_bytes(4, "little") + v for v in values)
    np_type = dtypes.BY_NAME[tensor.datatype].numpy
    if tensor.datatype == "UINT64":
        # Built as uint64 from the start: a mixed sequence would go through float64, and values
        # near 2**64 would round out of range.
        return np.asarray(values, dtype=np.uint64).tobytes()
    return np.asarray(values).astype(np_type).tobytes()


def _has_contents(tensor: Any) -> bool:
    return tensor.HasField("contents") and any(
        len(getattr(tensor.contents, f)) for f in _ALL_CONTENTS
    )


# Below this size protobuf parses the whole request (its copies of the tensor bytes cost less
# than walking the message in Python); from it on, the raw entries stay views of the buffer.
SPLIT_FROM = 64 * 1024


def infer_request_from_wire(data: Buffer) -> InferRequest:
    """Parse a serialized ModelInferRequest without copying its raw tensor bytes (the bytes
    of a request under ``SPLIT_FROM`` are copied once, by protobuf)."""
    raws: list[memoryview] = []
    try:
        if len(data) >= SPLIT_FROM:
            header, raws = wire.split_raw_inputs(data)
            msg = pb.ModelInferRequest.FromString(header)  # type: ignore[arg-type]  # any buffer
        else:
            msg = pb.ModelInferRequest.FromString(data)  # type: ignore[arg-type]
    except (wire.WireError, DecodeError) as exc:
        raise invalid_arg(f"malformed request: {exc}") from None
    if not raws and msg.raw_input_contents:
        # A small message (or an unusual one split_raw_inputs left whole): protobuf's copies.
        raws = [memoryview(r) for r in msg.raw_input_contents[:]]
    raw_iter = iter(raws)
    inputs: list[InputTensor] = []
    for tensor in msg.inputs[:]:  # a slice: protobuf's iterator is slower
        params = params_from_pb(tensor.parameters) if tensor.parameters else {}
        data_view: memoryview | None = None
        if _has_contents(tensor):
            if raws:
                raise invalid_arg(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{msg.model_name}'"
                )
            data_view = memoryview(_contents_to_raw(tensor, msg.model_name))
        elif "shared_memory_region" not in params:
            # Triton's rule: only inputs without contents or shared memory take a raw entry.
            data_view = next(raw_iter, None)
        inputs.append(
            InputTensor(tensor.name, tensor.datatype, tuple(tensor.shape[:]), data_view, params)
        )
    return InferRequest(
        model_name=msg.model_name,
        model_version=msg.model_version,
        id=msg.id,
        inputs=inputs,
        outputs=[
            RequestedOutput(o.name, params_from_pb(o.parameters) if o.parameters else {})
            for o in msg.outputs[:]
        ],
        parameters=params_from_pb(msg.parameters) if msg.parameters else {},
    )


def infer_response_to_wire(result: InferResult) -> bytes:
    header = pb.ModelInferResponse(
        model_name=result.model_name, model_version=result.model_version, id=result.id
    )
    params_to_pb(result.parameters, header.parameters)
    for out in result.outputs:
        header.outputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
    return wire.join_raw_outputs(header.SerializeToString(), (o.data for o in result.outputs))


def model_config_to_pb(config_dict: Mapping[str, Any]) -> mc.ModelConfig:
    # ParseDict is typed to take a dict (it only reads it); the copy is shallow.
    return json_format.ParseDict(dict(config_dict), mc.ModelConfig(), ignore_unknown_fields=True)


def tensor_metadata_to_pb(
    tensors: Iterable[Any], max_batch_size: int
) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    batch = [-1] if max_batch_size > 0 else []
    return [
        pb.ModelMetadataResponse.TensorMetadata(
            name=t.name, datatype=t.datatype, shape=batch + list(t.dims)
        )
        for t in tensors
    ]


def repository_index_to_pb(entries: Iterable[IndexEntry]) -> pb.RepositoryIndexResponse:
    response = pb.RepositoryIndexResponse()
    for e in entries:
        response.models.add(name=e.name, version=e.version, state=e.state, reason=e.reason)
    return response


def statistics_to_pb(rows: Iterable[tuple[str, int, Any]]) -> pb.ModelStatisticsResponse:
    response = pb.ModelStatisticsResponse()
    for name, version, stats in rows:
        entry = response.model_stats.add(
            name=name,
            version=str(version),
            last_inference=stats.last_inference_ms,
            inference_count=stats.inference_count,
            execution_count=stats.execution_count,
        )
        for field in ("success", "fail", "queue", "compute_input", "compute_infer",
                      "compute_output", "cache_hit", "cache_miss"):  # fmt: skip
            duration = getattr(stats, field)
            target = getattr(entry.inference_stats, field)
            target.count, target.ns = duration.count, duration.ns
        for size, per_size in sorted(stats.batches.items()):
            batch = entry.batch_stats.add(batch_size=size)
            for field in ("compute_input", "compute_infer", "compute_output"):
                duration = getattr(per_size, field)
                getattr(batch, field).count, getattr(batch, field).ns = duration.count, duration.ns
    return response


def repository_params_from_pb(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        out[key] = (which, getattr(param, which) if which else None)
    return out


FINAL_RESPONSE_KEY = "triton_final_response"


def stream_response_to_wire(result: InferResult, final: bool = True) -> bytes:
    """ModelStreamInferResponse{infer_response} built around the hand-made bytes."""
    result.parameters[FINAL_RESPONSE_KEY] = final
    inner = infer_response_to_wire(result)
    return wire.STREAM_RESPONSE_TAG + wire.encode_varint(len(inner)) + inner


def stream_error_to_wire(request: InferRequest | None, message: str, final: bool = True) -> bytes:
    """A per-request failure, sent in band so the stream stays open (Triton's behaviour)."""
    response = pb.ModelStreamInferResponse(error_message=message)
    if request is not None:
        inner = response.infer_response
        inner.id, inner.model_name, inner.model_version = (
            request.id,
            request.model_name,
            request.model_version,
        )
    response.infer_response.parameters[FINAL_RESPONSE_KEY].bool_param = final
    return response.SerializeToString()


def stream_empty_final_to_wire(request: InferRequest) -> bytes:
    """The empty final response of a decoupled request that asked for it: the request's id,
    model name and version (as the client sent them), no outputs."""
    response = pb.ModelStreamInferResponse()
    inner = response.infer_response
    inner.id, inner.model_name, inner.model_version = (
        request.id,
        request.model_name,
        request.model_version,
    )
    inner.parameters[FINAL_RESPONSE_KEY].bool_param = True
    return response.SerializeToString()


def trace_setting_from_pb(request: pb.TraceSettingRequest) -> dict[str, list[str]]:
    return {key: list(value.value) for key, value in request.settings.items()}


def trace_setting_to_pb(settings: Mapping[str, Iterable[str]]) -> pb.TraceSettingResponse:
    response = pb.TraceSettingResponse()
    for key, values in settings.items():
        response.settings[key].value.extend(values)
    return response


def log_settings_from_pb(request: pb.LogSettingsRequest) -> dict[str, tuple[str | None, Any]]:
    """``{key: (the oneof that is set, its value)}``: the checks need to know which it was."""
    out: dict[str, tuple[str | None, Any]] = {}
    for key, value in request.settings.items():
        kind = value.WhichOneof("parameter_choice")
        out[key] = (kind, getattr(value, kind) if kind else None)
    return out


def log_settings_to_pb(settings: Mapping[str, bool | int | str]) -> pb.LogSettingsResponse:
    response = pb.LogSettingsResponse()
    for key, value in settings.items():
        target = response.settings[key]
        if isinstance(value, bool):
            target.bool_param = value
        elif isinstance(value, int):
            target.uint32_param = value
        else:
            target.string_param = value
    return response
