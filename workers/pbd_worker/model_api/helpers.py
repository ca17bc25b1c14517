"""The pure helpers and constants of ``pb_utils``, with Triton's semantics and return values."""

from __future__ import annotations

from typing import Any

import numpy as np

from pbd_wire import dtypes
from pbd_worker.model_api import serialization, state
from pbd_worker.model_api.errors import TritonModelException

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# Config type name -> numpy type. Triton has no TYPE_BF16 here (numpy lacks it), and maps
# TYPE_BOOL to Python's bool.
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    d.config_name: (bool if d.name == "BOOL" else d.numpy.type)
    for d in dtypes.ALL
    if d.numpy is not None
}


def get_input_tensor_by_name(inference_request: Any, name: str) -> Any:
    """The request's input called ``name``, or ``None`` (an optional input not sent)."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: Any, name: str) -> Any:
    """The response's output called ``name`` (BLS responses), or ``None``."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _config_entry(model_config: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = model_config.get(section, [])
    for entry in entries:
        if entry["name"] == name:
            return entry
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    # A config JSON may omit fields at their defaults, so a policy without "decoupled" is False.
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32``; ``KeyError`` for names it doesn't know (and BF16)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """Config type number -> numpy type (13 -> ``np.object_``); ``None`` for others, BF16 too."""
    d = dtypes.BY_CONFIG_NUMBER.get(data_type)
    if d is None or d.numpy is None:
        return None
    return d.numpy.type


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> config type number; ``object_``/``bytes_`` are 13; else ``None``."""
    if data_type is None:
        return None
    try:
        dtype = np.dtype(data_type)
    except (TypeError, ValueError):
        return None
    if dtype.kind == "U":  # Triton maps only object_ and bytes_ to BYTES here
        return None
    d = dtypes.from_numpy(dtype)
    return None if d is None else d.config_number


def serialize_byte_tensor(input_tensor: np.ndarray) -> Any:
    """The BYTES wire form of an ``object_``/``bytes_`` array, as ``bytes``.

    As in Triton: an empty array gives ``()``, and other dtypes give ``None``.
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return serialization.serialize(input_tensor)
    return None


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """A 1-D ``np.object_`` array of ``bytes`` from the BYTES wire form.

    Accepts ``bytes``, any buffer, and the 1-element ``np.object_`` array that
    ``tritonclient.utils.serialize_byte_tensor`` returns.
    """
    if isinstance(encoded_tensor, np.ndarray) and encoded_tensor.dtype == np.object_:
        if encoded_tensor.size == 0:
            return np.empty(0, dtype=np.object_)
        if encoded_tensor.size != 1:
            raise TritonModelException(
                "deserialize_bytes_tensor() takes the serialized bytes, not an array of elements"
            )
        encoded_tensor = encoded_tensor.reshape(()).item()
    return serialization.deserialize(encoded_tensor)


def get_model_dir() -> str:
    """The directory of the model being served (set before ``initialize``)."""
    model_dir = state.model_dir()
    if model_dir is None:
        raise TritonModelException(
            "get_model_dir() is only available once the model is being loaded"
        )
    return model_dir
