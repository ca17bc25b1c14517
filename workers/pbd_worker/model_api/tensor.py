"""``pb_utils.Tensor``: a named tensor, from numpy, from DLPack, or over shared memory.

A tensor holds exactly one of:

* ``_array``: CPU values as an ndarray. For fixed-size types this is the data itself (an input's
  array is a zero-copy view of shared memory; BF16, which numpy lacks, is a ``uint16`` view of the
  raw bits). For BYTES it is the element array, given by the model or decoded on first use.
* ``_serialized``: a BYTES tensor's wire form (see ``serialization``), kept for inputs and made
  once for outputs, so a tensor is never encoded twice.
* ``_device_array``: a CUDA array (CuPy): ``from_dlpack`` of GPU memory, or an input in a
  client's CUDA region handed to a KIND_GPU model on the GPU.

The underscore methods at the bottom are the worker runtime's contract; models don't call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pbd_wire import dtypes
from pbd_wire.dtypes import DataType
from pbd_worker.model_api import dlpack, serialization
from pbd_worker.model_api.errors import TritonModelException

_UINT16 = np.dtype(np.uint16)  # BF16's bits


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")
    return name


class Tensor:
    """``Tensor(name, numpy_array)``; BYTES for ``object_``, ``bytes_`` and ``str_`` arrays.

    Non-contiguous arrays are kept as they are and laid out in C order only when sent.
    """

    _name: str
    _dt: DataType
    _shape: list[int]
    _array: np.ndarray | None
    _serialized: bytes | memoryview | None
    _device_array: Any
    _device_id: int

    def __init__(self, name: str, numpy_array: Any) -> None:
        # Triton's binding takes a numpy.ndarray and nothing else (a list, None, a numpy
        # scalar): TypeError, before the name is looked at.
        if not isinstance(name, str) or not isinstance(numpy_array, np.ndarray):
            raise TypeError(
                "Tensor(name, numpy_array) takes a str and a numpy.ndarray, got "
                f"{type(name).__name__} and {type(numpy_array).__name__}"
            )
        _check_name(name)
        array = numpy_array
        dt = dtypes.from_numpy(array.dtype)
        if dt is None:
            raise TritonModelException("NumPy dtype is not supported.")
        # _init's fields, for the tensor models build most (numpy's shape holds ints).
        self._name = name
        self._dt = dt
        self._shape = list(array.shape)
        self._array = array
        self._serialized = None
        self._device_array = None
        self._device_id = 0

    def _init(
        self,
        name: str,
        dt: DataType,
        shape: Sequence[int],
        *,
        array: np.ndarray | None = None,
        serialized: bytes | memoryview | None = None,
        device_array: Any = None,
        device_id: int = 0,
    ) -> None:
        self._name = name
        self._dt = dt
        self._shape = [int(d) for d in shape]
        self._array = array
        self._serialized = serialized
        self._device_array = device_array
        self._device_id = device_id

    @classmethod
    def _new(cls, name: str, dt: DataType, shape: Sequence[int], **storage: Any) -> Tensor:
        tensor = cls.__new__(cls)
        tensor._init(name, dt, shape, **storage)
        return tensor

    @classmethod
    def _from_buffer(
        cls, name: str, datatype: str, shape: Sequence[int], buffer: memoryview
    ) -> Tensor:
        """An input whose wire-form bytes are ``buffer`` (shared memory); nothing is copied."""
        _check_name(name)
        view = memoryview(buffer)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        return cls._over_bytes(name, datatype, [int(d) for d in shape], view)

    @classmethod
    def _over_bytes(cls, name: str, datatype: str, dims: list[int], view: memoryview) -> Tensor:
        """``_from_buffer`` for the runtime's inputs: ``name`` a str, ``dims`` a list of ints
        (a descriptor's), ``view`` a flat memoryview of bytes, kept by the tensor."""
        if not name:
            _check_name(name)
        dt = dtypes.BY_NAME.get(datatype)
        if dt is None:
            raise TritonModelException(f"input '{name}' has unknown datatype '{datatype}'")
        if dims and min(dims) < 0:
            raise TritonModelException(f"input '{name}' has a negative dimension in {dims}")
        tensor = cls.__new__(cls)  # _init's fields, dims already ints
        tensor._name = name
        tensor._dt = dt
        tensor._shape = dims
        tensor._device_array = None
        tensor._device_id = 0
        if dt.is_bytes:
            tensor._array = None
            tensor._serialized = view
            return tensor
        expected = math.prod(dims) * dt.itemsize
        if view.nbytes != expected:
            raise TritonModelException(
                f"input '{name}': a {datatype} tensor of shape {dims} needs {expected} bytes, "
                f"the buffer holds {view.nbytes}"
            )
        # frombuffer, not ndarray(buffer=...): its array holds ``view``'s export, so the mapping
        # stays while the model keeps the array (see pbd_wire.shm.Segment.close).
        np_dtype = dt.numpy if dt.numpy is not None else _UINT16
        tensor._array = np.frombuffer(view, dtype=np_dtype).reshape(dims)
        tensor._serialized = None
        return tensor

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> Tensor:
        """Zero-copy from a DLPack capsule or any object with ``__dlpack__`` (torch, jax, cupy)."""
        _check_name(name)
        if dlpack.is_capsule(dlpack_tensor):
            capsule = dlpack_tensor
        elif hasattr(dlpack_tensor, "__dlpack__"):
            device = getattr(dlpack_tensor, "__dlpack_device__", None)
            if device is not None and int(device()[0]) == dlpack.DEVICE_CUDA:
                return _from_cuda(name, dlpack_tensor)
            capsule = dlpack_tensor.__dlpack__(stream=None)
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have a "
                "`__dlpack__` attribute"
            )
        device_type, _ = dlpack.device_of(capsule)
        if device_type == dlpack.DEVICE_CUDA:
            return _from_cuda(name, _CapsuleSource(capsule))
        if device_type not in (dlpack.DEVICE_CPU, dlpack.DEVICE_CUDA_HOST):
            raise TritonModelException(
                f"DLDevice type {device_type} is not supported by Python backend."
            )
        array, dt = dlpack.import_cpu(capsule)
        return Tensor._new(name, dt, array.shape, array=array)

    def name(self) -> str:
        return self._name

    def shape(self) -> list[int]:
        return list(self._shape)

    def triton_dtype(self) -> int:
        """The model-config ``DataType`` number (``TYPE_FP32`` is 11)."""
        return self._dt.config_number

    def is_cpu(self) -> bool:
        return self._device_array is None

    def as_numpy(self) -> np.ndarray:
        if self._device_array is not None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        if self._dt.numpy is None:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                "from_dlpack() instead."
            )
        if self._array is None:
            elements = serialization.deserialize(self._wire_bytes())
            if elements.size != math.prod(self._shape):
                raise TritonModelException(
                    f"malformed BYTES tensor '{self._name}': shape {self._shape} needs "
                    f"{math.prod(self._shape)} elements, the data holds {elements.size}"
                )
            self._array = elements.reshape(self._shape)
        return self._array

    def to_dlpack(self) -> Any:
        if self._dt.is_bytes:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._device_array is not None:
            return self._device_array.__dlpack__()
        assert self._array is not None
        return dlpack.export(self._array, self._dt, self)

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        # Data is complete when a model holds the tensor: there is no pending work to order.
        # Newer consumers pass max_version/dl_device/copy; a legacy capsule answers them all.
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device_array is not None:
            return dlpack.DEVICE_CUDA, self._device_id
        return dlpack.DEVICE_CPU, 0

    def __repr__(self) -> str:
        return f"Tensor(name={self._name!r}, datatype={self._dt.name}, shape={self._shape})"

    # -- runtime contract ------------------------------------------------------------------

    @property
    def _datatype(self) -> str:
        """The protocol datatype string (``"FP32"``, ``"BYTES"``...)."""
        return self._dt.name

    def _wire_bytes(self) -> bytes | memoryview:
        if self._serialized is None:
            assert self._array is not None
            self._serialized = serialization.serialize(self._array)
        return self._serialized

    def _wire_nbytes(self) -> int:
        if self._dt.is_bytes:
            return len(self._wire_bytes())
        return math.prod(self._shape) * self._dt.itemsize

    @classmethod
    def _from_device(cls, name: str, datatype: str, device_array: Any, device_id: int) -> Tensor:
        """An input that stays in device memory (a CuPy array over a client's CUDA region)."""
        dt = dtypes.BY_NAME[datatype]
        return cls._new(
            name, dt, device_array.shape, device_array=device_array, device_id=device_id
        )

    def _write_into_device(self, dest: Any) -> None:
        """Write the wire form into ``dest``, a flat uint8 CuPy array at least as large: device
        to device for a GPU tensor, host to device otherwise. The copy may still be running
        on return; the caller synchronizes before anyone reads ``dest``."""
        nbytes = self._wire_nbytes()
        if dest.nbytes < nbytes:
            raise ValueError(f"tensor '{self._name}' needs {nbytes} bytes, dest has {dest.nbytes}")
        if nbytes == 0:
            return
        if self._device_array is not None:
            dest.data.copy_from_device(self._device_array.data, nbytes)
            return
        if self._dt.is_bytes:
            host = np.frombuffer(self._wire_bytes(), dtype=np.uint8)
        else:
            assert self._array is not None
            host = np.ascontiguousarray(self._array)
        dest.data.copy_from_host(host.ctypes.data, nbytes)

    def _write_into(self, dest: memoryview) -> None:
        """Write the wire form (C-order values, or the BYTES encoding) at the start of ``dest``."""
        nbytes = self._wire_nbytes()
        out = memoryview(dest)
        if out.format != "B" or out.ndim != 1:
            out = out.cast("B")
        if out.nbytes < nbytes:
            raise ValueError(f"tensor '{self._name}' needs {nbytes} bytes, dest has {out.nbytes}")
        if nbytes == 0:
            return
        if self._dt.is_bytes:
            out[:nbytes] = self._wire_bytes()
        elif self._device_array is not None:
            host = np.ndarray(self._shape, dtype=self._device_array.dtype, buffer=out)
            self._device_array.get(out=host)
        else:
            assert self._array is not None
            # copyto walks a strided source straight into the C-ordered destination.
            target = np.ndarray(self._array.shape, dtype=self._array.dtype, buffer=out)
            np.copyto(target, self._array, casting="no")

    def _array_or_none(self) -> np.ndarray | None:
        """The CPU array of a fixed-size tensor (BF16 as ``uint16``), so the runtime can see
        whether it already lies in shared memory; ``None`` for BYTES and GPU tensors."""
        if self._dt.is_bytes or self._device_array is not None:
            return None
        return self._array


class _CapsuleSource:
    """Presents a bare CUDA capsule to CuPy, which takes only ``__dlpack__`` objects."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.device_of(self._capsule)


def _from_cuda(name: str, source: Any) -> Tensor:
    # CuPy is imported only here: CPU-only workers never pay for it.
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as exc:
        raise TritonModelException(
            "a CUDA DLPack tensor needs CuPy in the worker's environment (pip install "
            "cupy-cuda12x); it is not installed"
        ) from exc
    try:
        array = cupy.from_dlpack(source)
    except Exception as exc:  # noqa: BLE001 - CuPy's refusal (e.g. bfloat16) becomes ours
        raise TritonModelException(f"cannot import the CUDA DLPack tensor: {exc}") from exc
    dt = dtypes.from_numpy(array.dtype)
    if dt is None or dt.is_bytes:
        raise TritonModelException(f"DLPack tensor dtype {array.dtype} is not supported.")
    if not array.flags.c_contiguous:
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
            "C-Order are supported."
        )
    return Tensor._new(name, dt, array.shape, device_array=array, device_id=int(array.device.id))
