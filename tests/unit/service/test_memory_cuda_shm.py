"""The CUDA half of the client shared-memory registry, on a machine without CUDA.

What Triton answers with no GPU, the one namespace system and CUDA regions share, the checks
made before a handle is opened, and the refusal (not a crash) when the daemon's environment has
no CuPy. Opening real handles is tested where a GPU is: tests/gpu/test_cuda_shm.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pbd.errors import Code, PbdError
from pbd.memory.client_shm import ClientShmRegistry, CudaRegion

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _registry(
    tmp_path: Path, gpus: list[int], on_cuda_removed: Callable[[CudaRegion], None] | None = None
) -> ClientShmRegistry:
    (tmp_path / "sys_key").write_bytes(b"\0" * 64)
    registry = ClientShmRegistry(
        enabled=True,
        key_prefixes=[],
        shm_dir=str(tmp_path),
        gpus=gpus,
        on_cuda_removed=on_cuda_removed or (lambda region: None),
    )
    registry.register("sys", "/sys_key", 0, 64)
    return registry


def _error(call) -> PbdError:
    with pytest.raises(PbdError) as info:
        result = call()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return info.value


def test_no_gpu_answers_as_triton_does(tmp_path: Path) -> None:
    registry = _registry(tmp_path, gpus=[])
    error = _error(lambda: registry.register_cuda("c", b"\1" * 64, 0, 64))
    assert error.code is Code.INVALID_ARG
    assert error.message == "failed to register CUDA shared memory region: 'c', GPUs not supported"
    assert registry.status_cuda("") == []
    missing = _error(lambda: registry.status_cuda("c"))
    assert missing.code is Code.NOT_FOUND
    assert missing.message == "Unable to find cuda shared memory region: 'c'"


def test_one_namespace_for_both_kinds(tmp_path: Path) -> None:
    registry = _registry(tmp_path, gpus=[0])
    clash = _error(lambda: registry.register_cuda("sys", b"\1" * 64, 0, 64))
    assert clash.code is Code.ALREADY_EXISTS
    assert clash.message == "shared memory region 'sys' already in manager"
    other = _error(lambda: registry.status_cuda("sys"))
    assert other.code is Code.NOT_FOUND
    assert "registered as system shared memory, not CUDA shared memory" in other.message
    registry.unregister_cuda("sys")  # another kind's name: OK, and it stays
    registry.unregister_cuda("")
    assert [r.name for r in registry.status("")] == ["sys"]


def test_handle_and_device_checked_before_cuda_is_touched(tmp_path: Path) -> None:
    registry = _registry(tmp_path, gpus=[0])
    short = _error(lambda: registry.register_cuda("c", b"\1" * 10, 0, 64))
    assert short.code is Code.INVALID_ARG
    assert short.message.startswith("failed to register shared memory region: invalid args")
    assert "10 bytes" in short.message
    device = _error(lambda: registry.register_cuda("c", b"\1" * 64, 3, 64))
    assert device.code is Code.INVALID_ARG and "device_id 3" in device.message
    assert registry.status_cuda("") == []


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here: the daemon would use it")
def test_without_cupy_a_cuda_registration_is_refused_with_what_to_install(tmp_path: Path) -> None:
    registry = _registry(tmp_path, gpus=[0])
    error = _error(lambda: registry.register_cuda("c", b"\1" * 64, 0, 64))
    assert error.code is Code.UNSUPPORTED
    assert "needs CuPy in the daemon's environment" in error.message
    assert "pbd[gpu]" in error.message
    assert registry.status_cuda("") == []


def test_disabled_client_shm_covers_cuda(tmp_path: Path) -> None:
    registry = ClientShmRegistry(enabled=False, key_prefixes=[], shm_dir=str(tmp_path), gpus=[0])
    for call in (
        lambda: registry.register_cuda("c", b"\1" * 64, 0, 64),
        lambda: registry.status_cuda(""),
        lambda: registry.unregister_cuda(""),
    ):
        assert _error(call).code is Code.UNSUPPORTED


def test_cuda_modules_do_not_import_cupy() -> None:
    """A CPU-only install never needs CuPy: importing the CUDA code paths loads none of it."""
    code = (
        "import sys\n"
        "import pbd.daemon, pbd.memory.cuda, pbd.memory.client_shm\n"
        "import pbd_worker.runtime, pbd_wire.cuda, pbd_worker.executor\n"
        "print('cupy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_cuda_region_in_use_goes_when_its_last_request_ends(tmp_path: Path) -> None:
    """Deferred unregister, as for system regions; workers are told only once it is gone.
    (The region is put in place as registration leaves it: opening a handle needs a GPU.)"""
    removed: list[int] = []
    registry = _registry(tmp_path, [0], lambda region: removed.append(region.generation))
    registry.regions["c"] = CudaRegion("c", b"\1" * 64, 0, 256, generation=41, pointer=0)
    held, offset = registry.acquire("c", 64, 128)
    assert (held.name, offset) == ("c", 64)  # offsets in a CUDA region are from its start
    bad = _error(lambda: registry.acquire("c", 200, 128))
    assert bad.message == "Invalid offset + byte size for shared memory region: 'c'"
    registry.unregister_cuda("c")
    assert removed == []  # in use: still there, and a new request may not take it
    assert _error(lambda: registry.acquire("c", 0, 8)).code is Code.NOT_FOUND
    again = _error(lambda: asyncio.run(registry.register_cuda("c", b"\1" * 64, 0, 64)))
    assert again.code is Code.ALREADY_EXISTS
    registry.release(held)
    assert removed == [41]
    assert registry.status_cuda("") == []
