"""The daemon's own use of CUDA: opening the IPC handles clients register.

CuPy is imported on the first CUDA registration, never before: a CPU-only install does not
need it (``pip install 'pbd[gpu]'`` adds it). Which GPUs exist is known without CUDA
(:func:`pbd.gpus.visible_gpus`), so a machine without one answers Triton's "GPUs not
supported" without loading anything.

The daemon opens a client's handle only to check it, as Triton does at registration (the
handle is valid, ``byte_size`` fits the allocation), and keeps it open until the region is
removed. It never reads those bytes: the worker that serves a request opens the same handle
itself and hands the model a CuPy array over the client's memory.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from pbd_wire.cuda import CudaUnavailable
from pbd_wire.cuda import import_cupy as import_worker_cupy

__all__ = ["IPC_HANDLE_SIZE", "CudaIpc", "CudaUnavailable", "import_cupy"]

IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess


_NO_CUPY = "CUDA memory needs CuPy in the daemon's environment (pip install 'pbd[gpu]')"


def import_cupy() -> Any:
    return import_worker_cupy(_NO_CUPY)


class CudaIpc:
    """Opens and closes IPC handles on the GPUs this daemon sees. Thread-safe: registration
    runs the (possibly slow: the first call creates a CUDA context) open off the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cuda_lib: Any = None

    def open(self, raw_handle: bytes, device_id: int) -> tuple[int, int]:
        """``(pointer, bytes from pointer to the end of its allocation)``; raises
        :class:`CudaUnavailable` without CuPy, ``RuntimeError`` (CUDA's text) on a bad handle."""
        cupy = import_cupy()
        with self._lock, cupy.cuda.Device(device_id):
            pointer = int(cupy.cuda.runtime.ipcOpenMemHandle(raw_handle, _LAZY_ENABLE_PEER_ACCESS))
            try:
                base, size = self._address_range(pointer)
            except BaseException:
                cupy.cuda.runtime.ipcCloseMemHandle(pointer)
                raise
        return pointer, base + size - pointer

    def close(self, pointer: int, device_id: int) -> None:
        cupy = import_cupy()
        with self._lock, cupy.cuda.Device(device_id):
            cupy.cuda.runtime.ipcCloseMemHandle(pointer)

    def _address_range(self, pointer: int) -> tuple[int, int]:
        """The allocation holding ``pointer`` (the driver's cuMemGetAddressRange: CuPy does not
        wrap it). The device's primary context is current: CuPy just used it."""
        if self._cuda_lib is None:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuMemGetAddressRange_v2
            fn.argtypes = [
                ctypes.POINTER(ctypes.c_uint64),
                ctypes.POINTER(ctypes.c_size_t),
                ctypes.c_uint64,
            ]
            fn.restype = ctypes.c_int
            self._cuda_lib = fn
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        status = self._cuda_lib(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer))
        if status != 0:
            raise RuntimeError(f"cuMemGetAddressRange failed with CUDA error {status}")
        return int(base.value), int(size.value)
