"""The one datatype table, shared by the daemon and the worker.

Three spellings of a tensor type meet here: the protocol string (``"FP32"``, ``"BYTES"``),
the model-config enum name (``"TYPE_FP32"``, ``"TYPE_STRING"``) with its number, and numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DataType:
    name: str  # protocol string
    config_name: str  # model_config.proto DataType enum name
    config_number: int
    numpy: np.dtype | None  # None for BF16, which numpy lacks
    itemsize: int  # 0 for BYTES: variable-length elements

    @property
    def is_bytes(self) -> bool:
        return self.name == "BYTES"


def _dt(
    name: str, config: str, number: int, np_type: type[np.generic] | None, itemsize: int
) -> DataType:
    return DataType(name, config, number, None if np_type is None else np.dtype(np_type), itemsize)


ALL: tuple[DataType, ...] = (
    _dt("BOOL", "TYPE_BOOL", 1, np.bool_, 1),
    _dt("UINT8", "TYPE_UINT8", 2, np.uint8, 1),
    _dt("UINT16", "TYPE_UINT16", 3, np.uint16, 2),
    _dt("UINT32", "TYPE_UINT32", 4, np.uint32, 4),
    _dt("UINT64", "TYPE_UINT64", 5, np.uint64, 8),
    _dt("INT8", "TYPE_INT8", 6, np.int8, 1),
    _dt("INT16", "TYPE_INT16", 7, np.int16, 2),
    _dt("INT32", "TYPE_INT32", 8, np.int32, 4),
    _dt("INT64", "TYPE_INT64", 9, np.int64, 8),
    _dt("FP16", "TYPE_FP16", 10, np.float16, 2),
    _dt("FP32", "TYPE_FP32", 11, np.float32, 4),
    _dt("FP64", "TYPE_FP64", 12, np.float64, 8),
    _dt("BYTES", "TYPE_STRING", 13, np.object_, 0),
    _dt("BF16", "TYPE_BF16", 14, None, 2),
)

BY_NAME: dict[str, DataType] = {d.name: d for d in ALL}
BY_CONFIG_NUMBER: dict[int, DataType] = {d.config_number: d for d in ALL}


# The dtypes of ALL (BYTES aside), for ``from_numpy``'s lookup without a walk: a dtype hashes
# as it compares (``float32`` and ``<f4`` alike, ``>f4`` not).
_BY_NUMPY: dict[np.dtype, DataType] = {
    d.numpy: d for d in ALL if d.numpy is not None and not d.is_bytes
}


def from_numpy(dtype: np.dtype) -> DataType | None:
    """The datatype of a numpy dtype; ``bytes_``/``object_`` arrays are BYTES."""
    if isinstance(dtype, np.dtype):
        found = _BY_NUMPY.get(dtype)
        if found is not None:
            return found
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return BY_NAME["BYTES"]
    for d in ALL:
        if d.numpy is not None and d.numpy == dtype and not d.is_bytes:
            return d
    return None
