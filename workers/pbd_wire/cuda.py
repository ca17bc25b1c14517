"""Clients' CUDA shared-memory regions and the daemon's CUDA pools, as this worker sees them.

A request names a registered CUDA region by its IPC handle and registration generation
(``CudaRef``). The worker opens the handle on first use and keeps it open until the daemon says
the registration is gone (``CudaRegionsClosed``), so a model's GPU input is a CuPy array over the
client's own device memory, and an output aimed at a CUDA region is copied once, on the device,
straight into it. The daemon's CUDA memory pools (GPU tensors of BLS calls) are named the same
way and opened once per worker. Nothing here runs, and CuPy is never imported, until a request
uses CUDA memory: CPU-only workers do not need it.

Which inputs stay on the GPU is Triton's model parameter ``FORCE_CPU_ONLY_INPUT_TENSORS``:
``"yes"`` (the default, as in Triton: unmodified models call ``as_numpy()``) copies CUDA inputs
to host memory once; ``"no"`` hands a KIND_GPU instance its CUDA inputs as GPU tensors
(``is_cpu() == False``, ``to_dlpack()``) without a host round trip. BYTES and BF16 inputs are
always copied to the host (CuPy has neither type).

Arrays over a client's region are valid while the request runs; a model must not keep them
past ``execute()``, since the region's handle is closed once the client unregisters it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np

from pbd_wire import worker_pb2 as wpb

_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
FORCE_CPU_KEY = "FORCE_CPU_ONLY_INPUT_TENSORS"


class CudaUnavailable(Exception):
    """CUDA memory was asked for and this process cannot use it (no CuPy); says what to do."""


_NO_CUPY = (
    "the request uses CUDA memory, and this worker's environment has no CuPy "
    "(pip install 'pbd[gpu]', or cupy-cuda12x in the model's environment)"
)


def import_cupy(missing: str = _NO_CUPY) -> Any:
    """CuPy, imported on first use; ``missing`` is the message when it is not installed."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as exc:
        raise CudaUnavailable(f"{missing}: {exc}") from None
    return cupy


def gpu_inputs(args: dict[str, str]) -> bool:
    """Whether CUDA inputs reach this instance's model on the GPU (see the module text).
    Raises ValueError with Triton's rule for a value other than yes/no."""
    if args.get("model_instance_kind") != "GPU":
        return False
    try:
        parameters = json.loads(args.get("model_config", "{}")).get("parameters", {})
    except (ValueError, AttributeError):
        return False
    value: str = (parameters.get(FORCE_CPU_KEY) or {}).get("string_value", "yes")
    if value not in ("yes", "no"):
        raise ValueError(f"parameter '{FORCE_CPU_KEY}' can only be 'yes' or 'no', got {value!r}")
    return value == "no"


class CudaRegions:
    """Opened client handles, by registration generation. Thread-safe (outputs may be written
    from a response sender's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (generation, handle) -> (pointer, device id); the handle too, because generations
        # start again in a new daemon that a worker re-attaches to.
        self._open: dict[tuple[int, bytes], tuple[int, int]] = {}

    def _pointer(self, ref: wpb.CudaRef) -> int:
        key = (ref.generation, bytes(ref.ipc_handle))
        with self._lock:
            opened = self._open.get(key)
            if opened is None:
                cupy = import_cupy()
                with cupy.cuda.Device(ref.device_id):
                    pointer = int(
                        cupy.cuda.runtime.ipcOpenMemHandle(
                            bytes(ref.ipc_handle), _LAZY_ENABLE_PEER_ACCESS
                        )
                    )
                opened = self._open[key] = (pointer, ref.device_id)
            return opened[0]

    def array(
        self, ref: wpb.CudaRef, offset: int, nbytes: int, dtype: Any, shape: list[int]
    ) -> Any:
        """A CuPy array over ``[offset, offset + nbytes)`` of the region (no copy)."""
        cupy = import_cupy()
        with cupy.cuda.Device(ref.device_id):
            if nbytes == 0:
                return cupy.empty(shape, dtype=dtype)
            memory = cupy.cuda.UnownedMemory(
                self._pointer(ref) + offset, nbytes, self, device_id=ref.device_id
            )
            return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def to_host(self, ref: wpb.CudaRef, offset: int, nbytes: int) -> np.ndarray:
        """The bytes copied once into host memory (for CPU inputs)."""
        host: np.ndarray = self.array(ref, offset, nbytes, np.uint8, [nbytes]).get()
        return host

    def bytes_at(self, ref: wpb.CudaRef, offset: int, nbytes: int) -> Any:
        """A flat uint8 CuPy array over the region's bytes, to write an output into."""
        return self.array(ref, offset, nbytes, np.uint8, [nbytes])

    @staticmethod
    def synchronize(ref: wpb.CudaRef) -> None:
        """Wait for copies into the region: the client reads it once the response is out."""
        cupy = import_cupy()
        with cupy.cuda.Device(ref.device_id):
            cupy.cuda.runtime.deviceSynchronize()

    def forget(self, generations: list[int]) -> None:
        gone = set(generations)
        with self._lock:
            closing = [self._open.pop(k) for k in list(self._open) if k[0] in gone]
        if not closing:
            return
        cupy = import_cupy()
        for pointer, device_id in closing:
            with cupy.cuda.Device(device_id):
                cupy.cuda.runtime.ipcCloseMemHandle(pointer)

    def close(self) -> None:
        with self._lock:
            generations = [k[0] for k in self._open]
        self.forget(generations)
