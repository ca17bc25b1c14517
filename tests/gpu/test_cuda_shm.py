"""CUDA shared memory end to end, with the real tritonclient.utils.cuda_shared_memory (the
client's cudaMalloc'd regions, exported as IPC handles) and tritonclient.grpc, against the
real daemon and its GPU workers: round trips, offsets, several regions, zero copy, misuse."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from gpu_env import GPU_MODELS, gpu_skip_reason
from pbd_harness import Daemon, error_of, running_daemon

if gpu_skip_reason() is None:
    import tritonclient.utils.cuda_shared_memory as cudashm

DEVICE = 0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("cudashm")
    with running_daemon(
        GPU_MODELS,
        root,
        "--allow-client-shm",
        "true",
        settle=["gpu_identity", "cpu_identity", "gpu_marker"],
    ) as d:
        yield d


@pytest.fixture
def regions() -> Iterator[dict[str, object]]:
    made: dict[str, object] = {}
    yield made
    for handle in made.values():
        cudashm.destroy_shared_memory_region(handle)


def _region(client, made: dict, name: str, size: int) -> object:
    handle = cudashm.create_shared_memory_region(name, size, DEVICE)
    made[name] = handle
    client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), DEVICE, size)
    return handle


def _bytes(handle: object, size: int) -> np.ndarray:
    return cudashm.get_contents_as_numpy(handle, np.uint8, [size])


def test_gpu_model_round_trip_with_offsets_and_two_regions(daemon: Daemon, regions: dict) -> None:
    client = daemon.client()
    data = np.arange(1024, dtype=np.float32)
    pad = np.zeros(64, dtype=np.float32)  # the input starts 256 bytes into its region
    src = _region(client, regions, "src", 256 + data.nbytes)
    dst = _region(client, regions, "dst", 512 + data.nbytes)
    cudashm.set_shared_memory_region(src, [pad, data])
    x = grpcclient.InferInput("INPUT0", [1024], "FP32")
    x.set_shared_memory("src", data.nbytes, offset=256)
    out = grpcclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("dst", data.nbytes, offset=512)
    where = grpcclient.InferRequestedOutput("ON_CPU")
    result = client.infer("gpu_identity", [x], outputs=[out, where])
    assert result.as_numpy("ON_CPU").tolist() == [False]  # the model saw a GPU tensor
    got = _bytes(dst, 512 + data.nbytes)[512:].view(np.float32)
    np.testing.assert_array_equal(got, data)
    status = client.get_cuda_shared_memory_status("dst").regions["dst"]
    assert (status.device_id, status.byte_size) == (DEVICE, 512 + data.nbytes)
    # The GPU output without a region comes back over gRPC (copied to the host once).
    plain = client.infer("gpu_identity", [x])
    np.testing.assert_array_equal(plain.as_numpy("OUTPUT0"), data)
    client.unregister_cuda_shared_memory()
    assert len(client.get_cuda_shared_memory_status().regions) == 0


def test_cpu_model_gets_a_host_copy(daemon: Daemon, regions: dict) -> None:
    client = daemon.client()
    data = np.linspace(-1, 1, 300, dtype=np.float32)
    src = _region(client, regions, "csrc", data.nbytes)
    cudashm.set_shared_memory_region(src, [data])
    x = grpcclient.InferInput("INPUT0", [300], "FP32")
    x.set_shared_memory("csrc", data.nbytes)
    result = client.infer("cpu_identity", [x])
    assert result.as_numpy("ON_CPU").tolist() == [True]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    client.unregister_cuda_shared_memory("csrc")


def test_the_model_works_on_the_clients_device_memory(daemon: Daemon, regions: dict) -> None:
    """Zero copy: the model writes into its input, the client reads the change in its region."""
    client = daemon.client()
    src = _region(client, regions, "marked", 64)
    cudashm.set_shared_memory_region(src, [np.zeros(64, dtype=np.uint8)])
    x = grpcclient.InferInput("INPUT0", [64], "UINT8")
    x.set_shared_memory("marked", 64)
    assert client.infer("gpu_marker", [x]).as_numpy("DONE").tolist() == [1]
    assert bytes(_bytes(src, 64)[:4]) == b"PBD!"
    client.unregister_cuda_shared_memory("marked")


def test_misuse_is_refused_and_the_daemon_keeps_serving(daemon: Daemon, regions: dict) -> None:
    client = daemon.client()
    data = np.ones(16, dtype=np.float32)
    src = _region(client, regions, "m_src", data.nbytes)
    _region(client, regions, "m_small", 8)
    cudashm.set_shared_memory_region(src, [data])
    raw = cudashm.get_raw_handle(src)
    again = error_of(lambda: client.register_cuda_shared_memory("m_src", raw, DEVICE, 64))
    assert again.status() == "StatusCode.ALREADY_EXISTS"
    too_big = error_of(lambda: client.register_cuda_shared_memory("big", raw, DEVICE, 1 << 30))
    assert too_big.status() == "StatusCode.INVALID_ARGUMENT" and "invalid args" in too_big.message()
    junk = base64.b64encode(os.urandom(64))
    bad = error_of(lambda: client.register_cuda_shared_memory("junk", junk, DEVICE, 64))
    assert bad.status() == "StatusCode.INVALID_ARGUMENT" and "invalid args" in bad.message()

    def request(region: str, nbytes: int, offset: int = 0, out: str | None = None, size: int = 0):
        x = grpcclient.InferInput("INPUT0", [16], "FP32")
        x.set_shared_memory(region, nbytes, offset=offset)
        outputs = None
        if out is not None:
            o = grpcclient.InferRequestedOutput("OUTPUT0")
            o.set_shared_memory(out, size)
            outputs = [o]
        return error_of(lambda: client.infer("gpu_identity", [x], outputs=outputs))

    assert "Unable to find shared memory region" in request("nope", 64).message()
    assert "Invalid offset" in request("m_src", 64, offset=64).message()
    assert "Invalid offset + byte size" in request("m_src", 64, offset=8).message()
    small = request("m_src", 64, out="m_small", size=8)
    assert small.status() == "StatusCode.INTERNAL"
    assert "should be at least 64 bytes" in small.message()
    x = grpcclient.InferInput("INPUT0", [16], "FP32")
    x.set_shared_memory("m_src", 64)
    np.testing.assert_array_equal(client.infer("gpu_identity", [x]).as_numpy("OUTPUT0"), data)
    client.unregister_cuda_shared_memory()


def test_cuda_and_system_regions_in_one_request(
    daemon: Daemon, regions: dict, tmp_path: Path
) -> None:
    import tritonclient.utils.shared_memory as sysshm

    client = daemon.client()
    data = np.arange(32, dtype=np.float32)
    src = _region(client, regions, "mix_src", data.nbytes)
    cudashm.set_shared_memory_region(src, [data])
    key = f"/pbdgpu{os.getpid()}_out"
    host = sysshm.create_shared_memory_region("mix_out", key, data.nbytes)
    try:
        client.register_system_shared_memory("mix_out", key, data.nbytes)
        x = grpcclient.InferInput("INPUT0", [32], "FP32")
        x.set_shared_memory("mix_src", data.nbytes)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("mix_out", data.nbytes)
        client.infer("gpu_identity", [x], outputs=[out])  # GPU input, host output region
        got = sysshm.get_contents_as_numpy(host, np.float32, [32])
        np.testing.assert_array_equal(got, data)
        client.unregister_system_shared_memory("mix_out")
    finally:
        sysshm.destroy_shared_memory_region(host)
    client.unregister_cuda_shared_memory()
