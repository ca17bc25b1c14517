"""System shared memory with the real tritonclient.utils.shared_memory and tritonclient.grpc:
registration, inputs and outputs in regions (offsets, several regions), zero copy, misuse."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)
from tritonclient.utils import InferenceServerException

from pbd.gpus import visible_gpus

PREFIX = f"pbdclient{os.getpid()}_"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("shm")
    repo = make_repository(
        root,
        {
            "add_sub": EXAMPLE_MODELS / "add_sub",
            "identity_fp32": EXAMPLE_MODELS / "identity_fp32",
            "shm_probe": TEST_MODELS / "shm_probe",
            "identity_all": TEST_MODELS / "identity_all",
        },
    )
    models = ["add_sub", "identity_fp32", "shm_probe", "identity_all"]
    with running_daemon(repo, root, "--allow-client-shm", "true", settle=models) as d:
        yield d


@pytest.fixture
def regions() -> Iterator[dict[str, object]]:
    made: dict[str, object] = {}

    def create(name: str, size: int) -> object:
        handle = shm.create_shared_memory_region(name, f"/{PREFIX}{name}", size)
        made[name] = handle
        return handle

    made["create"] = create  # type: ignore[assignment]
    yield made
    for name, handle in made.items():
        if name != "create":
            shm.destroy_shared_memory_region(handle)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(PREFIX)]


def test_inputs_and_outputs_in_regions_with_offsets(daemon: Daemon, regions: dict) -> None:
    client = daemon.client()
    client.unregister_system_shared_memory()
    a, b = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
    inp = regions["create"]("in", 64)
    out = regions["create"]("out", 64)
    shm.set_shared_memory_region(inp, [a, b])  # a at 0, b at 16
    client.register_system_shared_memory("in", f"/{PREFIX}in", 64)
    client.register_system_shared_memory("out", f"/{PREFIX}out", 64)
    x, y = (
        grpcclient.InferInput("INPUT0", [4], "FP32"),
        grpcclient.InferInput("INPUT1", [4], "FP32"),
    )
    x.set_shared_memory("in", 16)
    y.set_shared_memory("in", 16, offset=16)
    o0, o1 = grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")
    o0.set_shared_memory("out", 16, offset=32)
    o1.set_shared_memory("out", 16)
    result = client.infer("add_sub", [x, y], outputs=[o0, o1])
    # The bytes went to the region: the reply carries shape and type, and an empty raw entry.
    assert list(result.get_output("OUTPUT0").shape) == [4]
    assert result.get_response().raw_output_contents[0] == b""
    assert shm.get_contents_as_numpy(out, np.float32, [4], offset=32).tolist() == (a + b).tolist()
    assert shm.get_contents_as_numpy(out, np.float32, [4]).tolist() == (a - b).tolist()
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert set(status) == {"in", "out"} and int(status["in"]["byte_size"]) == 64
    # Mixed: one input from a region, the other over the wire.
    z = infer_input("INPUT1", b, "FP32")
    mixed = client.infer("add_sub", [x, z])
    assert mixed.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    client.unregister_system_shared_memory("in")
    assert (
        "Unable to find system shared memory region: 'in'"
        in error_of(lambda: client.get_system_shared_memory_status("in")).message()
    )
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def test_identity_of_a_region_input_answers_over_the_wire(daemon: Daemon, regions: dict) -> None:
    """An identity model returns its input, which lies in the client's region; the output is
    not aimed at a region, so the daemon must read it from there for the reply."""
    client = daemon.client()
    client.unregister_system_shared_memory()
    data = np.arange(32, dtype=np.float32).reshape(2, 16)
    inp = regions["create"]("ident", data.nbytes)
    shm.set_shared_memory_region(inp, [data])
    client.register_system_shared_memory("ident", f"/{PREFIX}ident", data.nbytes)
    x = grpcclient.InferInput("INPUT0", [2, 16], "FP32")
    x.set_shared_memory("ident", data.nbytes)
    result = client.infer("identity_fp32", [x])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    client.unregister_system_shared_memory()


def test_a_bytes_input_in_a_region_is_checked_as_triton_checks_it(
    daemon: Daemon, regions: dict
) -> None:
    """Only a worker maps a client's region, so the worker checks a BYTES input there before
    the model sees it: a malformed one is refused with Triton 2.51's status and message, the
    same the request gets with the bytes in its body; a well-formed one runs."""
    client = daemon.client()
    client.unregister_system_shared_memory()
    handle = regions["create"]("strings", 64)
    client.register_system_shared_memory("strings", f"/{PREFIX}strings", 64)
    cases = {
        b"\x05\x00": "[request id: <id_unknown>] incomplete string length indicator for "
        "inference input 'IN_BYTES' for model 'identity_all', expecting 4 bytes but only 2 "
        "bytes available. Please make sure the string length indicator is in one buffer.",
        b"\x05\x00\x00\x00ab": "incomplete string data for inference input 'IN_BYTES', "
        "expecting string of length 5 but only 2 bytes available",
        b"\x01\x00\x00\x00a\x00\x00\x00\x00": "[request id: <id_unknown>] unexpected number "
        "of string elements 2 for inference input 'IN_BYTES' for model 'identity_all', "
        "expecting 1",
    }
    for data, message in cases.items():
        shm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)])
        tensor = grpcclient.InferInput("IN_BYTES", [1], "BYTES")
        tensor.set_shared_memory("strings", len(data))
        refused = error_of(lambda tensor=tensor: client.infer("identity_all", [tensor]))
        assert (refused.status(), refused.message()) == ("StatusCode.INVALID_ARGUMENT", message)
        inline = grpcclient.InferInput("IN_BYTES", [1], "BYTES")
        inline._raw_content = data
        refused = error_of(lambda inline=inline: client.infer("identity_all", [inline]))
        assert (refused.status(), refused.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    good = b"\x02\x00\x00\x00ok"
    shm.set_shared_memory_region(handle, [np.frombuffer(good, np.uint8)])
    tensor = grpcclient.InferInput("IN_BYTES", [1], "BYTES")
    tensor.set_shared_memory("strings", len(good))
    assert client.infer("identity_all", [tensor]).as_numpy("OUT_BYTES").tolist() == [b"ok"]
    client.unregister_system_shared_memory()


def test_the_model_reads_the_clients_memory(daemon: Daemon, regions: dict, tmp_path: Path) -> None:
    client = daemon.client()
    value = regions["create"]("probe", 4)
    shm.set_shared_memory_region(value, [np.array([1], np.int32)])
    client.register_system_shared_memory("probe", f"/{PREFIX}probe", 4)
    v = grpcclient.InferInput("VALUE", [1], "INT32")
    v.set_shared_memory("probe", 4)
    folder = infer_input("DIR", np.array([str(tmp_path).encode()], dtype=np.object_), "BYTES")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.infer, "shm_probe", [v, folder])
        wait_until(lambda: (tmp_path / "started").exists(), 60, "the model to start")
        # In flight: unregistering is deferred, the name is still taken.
        client.unregister_system_shared_memory("probe")
        taken = error_of(
            lambda: client.register_system_shared_memory("probe", f"/{PREFIX}probe", 4)
        )
        assert taken.status() == "StatusCode.ALREADY_EXISTS"
        shm.set_shared_memory_region(value, [np.array([2], np.int32)])  # after registration
        (tmp_path / "go").touch()
        seen = future.result(timeout=60).as_numpy("SEEN").tolist()
    assert seen == [1, 2]  # the second read saw the client's write: zero copy
    wait_until(
        lambda: (
            "probe" not in client.get_system_shared_memory_status(as_json=True).get("regions", {})
        ),
        30,
        "the deferred unregister",
    )


def test_misuse_is_refused_and_the_daemon_keeps_serving(daemon: Daemon, regions: dict) -> None:
    client = daemon.client()
    small = regions["create"]("small", 8)
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    client.register_system_shared_memory("small", f"/{PREFIX}small", 8)
    cases = []
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_shared_memory("nope", 16)
    cases.append(([x], None, "StatusCode.NOT_FOUND", "Unable to find shared memory region: 'nope'"))
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_shared_memory("small", 16)
    cases.append(([x], None, "StatusCode.INVALID_ARGUMENT", "Invalid offset + byte size"))
    out = grpcclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("small", 8)
    cases.append(
        (
            [infer_input("INPUT0", data, "FP32")],
            [out],
            "StatusCode.INTERNAL",
            "should be at least 16 bytes",
        )
    )
    for inputs, outputs, status, message in cases:
        error = error_of(lambda i=inputs, o=outputs: client.infer("identity_fp32", i, outputs=o))
        assert error.status() == status and message in error.message(), error
    missing = error_of(lambda: client.register_system_shared_memory("m", "/no_such_key_pbd", 8))
    assert (
        missing.status() == "StatusCode.INTERNAL"
        and "Unable to open shared memory region" in missing.message()
    )
    too_big = error_of(lambda: client.register_system_shared_memory("b", f"/{PREFIX}small", 64))
    assert "invalid args" in too_big.message()
    cuda = error_of(lambda: client.register_cuda_shared_memory("c", b"x" * 64, 0, 64))
    assert "GPUs not supported" in cuda.message()
    ok = client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])
    assert ok.as_numpy("OUTPUT0").tolist() == data.tolist()
    client.unregister_system_shared_memory()
    del small


def test_links_and_the_daemons_own_segments_cannot_be_registered(
    daemon: Daemon, tmp_path: Path
) -> None:
    """Issue 18, findings 1 and 2: a link to a file outside /dev/shm, and a worker arena."""
    target = tmp_path / "secret"
    target.write_bytes(b"secret!!" * 2)
    link = Path("/dev/shm", f"{PREFIX}link")
    link.symlink_to(target)
    client = daemon.client()
    try:
        refused = error_of(lambda: client.register_system_shared_memory("l", f"/{link.name}", 16))
    finally:
        link.unlink()
    assert refused.status() == "StatusCode.INTERNAL"
    assert refused.message() == (
        f"Unable to open shared memory region: '/{link.name}' (a symbolic link)"
    )
    data = np.ones((1, 4), np.float32)
    client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])  # the arena exists
    arena = daemon.shm_segments()[0]  # a memfd: no file of that name in /dev/shm to open
    own = error_of(lambda: client.register_system_shared_memory("a", f"/{arena}", 16))
    assert own.status() == "StatusCode.INTERNAL"
    assert own.message().startswith("Unable to open shared memory region")
    assert client.get_system_shared_memory_status().regions == {}


def test_key_allow_list(start_daemon: DaemonFactory, regions: dict, tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {"identity_fp32": EXAMPLE_MODELS / "identity_fp32"})
    d = start_daemon(
        repo,
        "--allow-client-shm",
        "true",
        "--client-shm-key-prefix",
        "allowed_",
        settle=["identity_fp32"],
    )
    regions["create"]("private", 8)
    refused = error_of(
        lambda: d.client().register_system_shared_memory("p", f"/{PREFIX}private", 8)
    )
    assert (
        refused.status() == "StatusCode.INVALID_ARGUMENT" and "is not allowed" in refused.message()
    )
    assert d.client().is_server_live()


@pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU: tests/gpu covers it")
def test_cuda_shared_memory_without_a_gpu(daemon: Daemon, regions: dict) -> None:
    """Triton's answers on a machine without GPUs, over gRPC and HTTP; one namespace with the
    system regions."""
    client = daemon.client()
    client.unregister_system_shared_memory()
    regions["create"]("ns", 16)
    client.register_system_shared_memory("ns", f"/{PREFIX}ns", 16)
    handle = base64.b64encode(b"\1" * 64)
    cuda = error_of(lambda: client.register_cuda_shared_memory("c", handle, 0, 64))
    assert cuda.status() == "StatusCode.INVALID_ARGUMENT"
    assert cuda.message() == "failed to register CUDA shared memory region: 'c', GPUs not supported"
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    other = error_of(lambda: client.get_cuda_shared_memory_status("ns"))
    assert other.status() == "StatusCode.NOT_FOUND"
    assert "registered as system shared memory, not CUDA shared memory" in other.message()
    client.unregister_cuda_shared_memory("ns")  # another kind's region: OK, and it stays
    assert list(client.get_system_shared_memory_status().regions) == ["ns"]
    http = httpclient.InferenceServerClient(daemon.http_url)
    try:
        assert http.get_cuda_shared_memory_status() == []
        with pytest.raises(InferenceServerException, match="GPUs not supported"):
            http.register_cuda_shared_memory("c", handle, 0, 64)
    finally:
        http.close()
    client.unregister_system_shared_memory()
