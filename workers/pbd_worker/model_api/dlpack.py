"""DLPack capsules for CPU tensors, made and read with ctypes.

numpy's own ``__dlpack__``/``from_dlpack`` can carry neither bfloat16 nor read-only memory, and a
model's BF16 tensors (and read-only arrays) must still reach torch or jax, so the model API fills
and reads the C structures itself. Only the legacy ``"dltensor"`` capsule is used: it is what
Triton hands out and what every producer returns when asked without ``max_version``.

Lifetimes: an exported capsule keeps its source array alive until the consumer calls the
tensor's deleter (or, if never consumed, until the capsule is garbage-collected). An imported
capsule is renamed ``"used_dltensor"`` and its deleter runs once the numpy view over it dies.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from pbd_wire.dtypes import BY_NAME, DataType
from pbd_worker.model_api.errors import TritonModelException

DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3

# DLDataTypeCode values.
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6

# datatype name -> (DLPack type code, bits) for what we export.
_EXPORT_CODES: dict[str, tuple[int, int]] = {
    "BOOL": (_BOOL, 8),
    "UINT8": (_UINT, 8),
    "UINT16": (_UINT, 16),
    "UINT32": (_UINT, 32),
    "UINT64": (_UINT, 64),
    "INT8": (_INT, 8),
    "INT16": (_INT, 16),
    "INT32": (_INT, 32),
    "INT64": (_INT, 64),
    "FP16": (_FLOAT, 16),
    "FP32": (_FLOAT, 32),
    "FP64": (_FLOAT, 64),
    "BF16": (_BFLOAT, 16),
}
_IMPORT_CODES: dict[tuple[int, int], str] = {v: k for k, v in _EXPORT_CODES.items()}
# Triton itself labels BOOL as a 1-bit integer; accept that spelling too.
_IMPORT_CODES[(_INT, 1)] = "BOOL"
_IMPORT_CODES[(_UINT, 1)] = "BOOL"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _ManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedTensor))
_ManagedTensor._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Own prototypes rather than attributes of ctypes.pythonapi, whose argtypes other libraries may
# also set. The capsule is passed by address (``id()``), valid while the caller holds it.
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor
)(("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

# Module constants: a capsule keeps a pointer to its name, so these bytes must never die.
_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"

# Managed-tensor address -> the objects an exported capsule keeps alive.
_exported: dict[int, tuple[Any, ...]] = {}


def _release_export(managed: Any) -> None:
    _exported.pop(ctypes.cast(managed, ctypes.c_void_p).value or 0, None)


def _on_capsule_freed(capsule: int) -> None:
    # A capsule still named "dltensor" was never consumed: nobody else will call the deleter.
    if _capsule_is_valid(capsule, _NAME):
        _exported.pop(_capsule_get_pointer(capsule, _NAME) or 0, None)


_DELETER = _Deleter(_release_export)
_CAPSULE_DESTRUCTOR = _CapsuleDestructor(_on_capsule_freed)


def is_capsule(obj: object) -> bool:
    return type(obj).__name__ == "PyCapsule"


def export(array: np.ndarray, dt: DataType, owner: object) -> Any:
    """A ``"dltensor"`` capsule over ``array``'s CPU memory, typed as ``dt``.

    ``owner`` (the ``Tensor``) is kept alive with the array while a consumer holds the memory.
    """
    code, bits = _EXPORT_CODES[dt.name]
    itemsize = array.dtype.itemsize
    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    strides = None
    if not array.flags.c_contiguous:
        if any(s % itemsize for s in array.strides):
            raise TritonModelException("cannot export an array whose strides split its elements")
        strides = (ctypes.c_int64 * array.ndim)(*(s // itemsize for s in array.strides))
    managed = _ManagedTensor()
    tensor = managed.dl_tensor
    tensor.data = array.__array_interface__["data"][0]
    tensor.device = _Device(DEVICE_CPU, 0)
    tensor.ndim = array.ndim
    tensor.dtype = _DataType(code, bits, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    if strides is not None:
        tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    _exported[address] = (managed, shape, strides, array, owner)
    return _capsule_new(address, _NAME, _CAPSULE_DESTRUCTOR)


def _managed(capsule: object) -> _ManagedTensor:
    if not _capsule_is_valid(id(capsule), _NAME):
        raise TritonModelException(
            "DLPack capsule was already consumed or is not a DLPack tensor capsule."
        )
    return _ManagedTensor.from_address(_capsule_get_pointer(id(capsule), _NAME))


def device_of(capsule: object) -> tuple[int, int]:
    """``(device_type, device_id)`` of an unconsumed capsule, without consuming it."""
    device = _managed(capsule).dl_tensor.device
    return device.device_type, device.device_id


class _Imported:
    """Exposes a consumed DLPack tensor to numpy and calls its deleter when numpy lets go."""

    def __init__(self, address: int, interface: dict[str, Any]) -> None:
        self.__array_interface__ = interface
        finalizer = weakref.finalize(self, _call_deleter, address)
        finalizer.atexit = False  # the process is going away; the memory goes with it


def _call_deleter(address: int) -> None:
    managed = _ManagedTensor.from_address(address)
    if managed.deleter:
        managed.deleter(ctypes.pointer(managed))


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    if strides is None or 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        # A dimension of one element may carry any stride (torch often leaves it arbitrary).
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def import_cpu(capsule: object) -> tuple[np.ndarray, DataType]:
    """Consume a CPU (or CUDA-host) capsule: a zero-copy numpy view and the tensor's datatype.

    BF16 comes back as a ``uint16`` view of the raw bits. Non-contiguous tensors and unsupported
    element types are refused before the capsule is consumed.
    """
    managed = _managed(capsule)
    tensor = managed.dl_tensor
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides else None
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    name = _IMPORT_CODES.get((code, bits)) if lanes == 1 else None
    if name is None:
        raise TritonModelException(
            f"DLPack tensor has an unsupported data type (code {code}, {bits} bits, {lanes} lanes)."
        )
    if not _is_c_contiguous(shape, strides):
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
            "C-Order are supported."
        )
    empty = 0 in shape
    if not tensor.data and not empty:
        raise TritonModelException("DLPack tensor has no data pointer.")
    dt = BY_NAME[name]
    np_dtype = dt.numpy if dt.numpy is not None else np.dtype(np.uint16)
    address = ctypes.addressof(managed)
    _capsule_set_name(id(capsule), _USED_NAME)
    if empty:
        # Nothing to view; release the producer's memory now.
        _call_deleter(address)
        return np.empty(shape, dtype=np_dtype), dt
    interface = {
        "version": 3,
        "shape": shape,
        "typestr": np_dtype.str,
        "data": (tensor.data + tensor.byte_offset, False),
        "strides": None,
    }
    return np.asarray(_Imported(address, interface)), dt
