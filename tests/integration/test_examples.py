"""The bundled example repository served by the real daemon, driven by tritonclient.grpc."""

from __future__ import annotations

import queue
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import EXAMPLE_MODEL_NAMES, ROOT, Daemon, error_of, infer_input


@pytest.fixture(scope="module")
def client(examples_daemon: Daemon) -> grpcclient.InferenceServerClient:
    return examples_daemon.client()


def add_sub_inputs(
    a: np.ndarray, b: np.ndarray, datatype: str = "FP32"
) -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", a, datatype), infer_input("INPUT1", b, datatype)]


# -- server --------------------------------------------------------------------------------------


def test_server_is_live_and_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata.name == "pbd"
    assert metadata.version != ""
    assert "model_repository" in metadata.extensions


def test_every_example_model_is_ready(client: grpcclient.InferenceServerClient) -> None:
    for name in EXAMPLE_MODEL_NAMES:
        assert client.is_model_ready(name) is True, name
        assert client.is_model_ready(name, "1") is True, name


def test_model_ready_is_false_for_unknown_model_or_version(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert client.is_model_ready("no_such_model") is False
    assert client.is_model_ready("add_sub", "7") is False


def test_repository_index_lists_every_example_ready(
    client: grpcclient.InferenceServerClient,
) -> None:
    index = client.get_model_repository_index(as_json=True)
    entries = {(m["name"], m.get("version", ""), m.get("state", "")) for m in index["models"]}
    assert entries == {(name, "1", "READY") for name in EXAMPLE_MODEL_NAMES}


# -- metadata and config -------------------------------------------------------------------------


def test_add_sub_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_sub")
    assert metadata.name == "add_sub"
    assert list(metadata.versions) == ["1"]
    assert metadata.platform == "python"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [4]),
        ("INPUT1", "FP32", [4]),
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("OUTPUT0", "FP32", [4]),
        ("OUTPUT1", "FP32", [4]),
    ]


def test_metadata_of_variable_shapes_and_bytes(client: grpcclient.InferenceServerClient) -> None:
    identity = client.get_model_metadata("identity_fp32", "1")
    assert list(identity.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in identity.inputs] == [
        ("INPUT0", "FP32", [-1, -1])
    ]
    strings = client.get_model_metadata("string_ops")
    assert [(t.name, t.datatype, list(t.shape)) for t in strings.inputs] == [
        ("INPUT0", "BYTES", [-1])
    ]
    assert [(t.name, t.datatype) for t in strings.outputs] == [
        ("UPPER", "BYTES"),
        ("LENGTH", "INT32"),
    ]


def test_metadata_as_json(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_sub_int32", as_json=True)
    assert metadata["name"] == "add_sub_int32"
    assert metadata["versions"] == ["1"]
    assert [i["datatype"] for i in metadata["inputs"]] == ["INT32", "INT32"]


def test_add_sub_config(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("add_sub", as_json=True)["config"]
    assert config["name"] == "add_sub"
    assert config["backend"] == "python"
    assert config.get("max_batch_size", 0) == 0
    # protobuf's JSON form writes int64 values (dims) as strings.
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", ["4"]),
        ("INPUT1", "TYPE_FP32", ["4"]),
    ]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0", "OUTPUT1"]
    [group] = config["instance_group"]
    assert group["kind"] == "KIND_CPU"
    assert group["count"] == 1
    assert group["name"] == "add_sub_0"


def test_config_as_protobuf(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("identity_fp32").config
    assert config.name == "identity_fp32"
    assert list(config.input[0].dims) == [-1, -1]
    assert config.input[0].data_type == 11  # TYPE_FP32


def test_lookup_errors(client: grpcclient.InferenceServerClient) -> None:
    error = error_of(lambda: client.get_model_metadata("nope"))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'nope' is not found"

    error = error_of(lambda: client.get_model_config("nope"))
    assert error.status() == "StatusCode.NOT_FOUND"

    error = error_of(lambda: client.get_model_metadata("add_sub", "7"))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'add_sub' version 7 is not found"


# -- inference -----------------------------------------------------------------------------------


def test_add_sub_fp32(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([1.5, 2.0, -3.0, 0.25], dtype=np.float32)
    b = np.array([0.5, 4.0, 1.0, 0.25], dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, b), request_id="r-1")
    assert result.get_response().model_name == "add_sub"
    assert result.get_response().model_version == "1"
    assert result.get_response().id == "r-1"
    total, difference = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert total.dtype == np.float32 and difference.dtype == np.float32
    np.testing.assert_array_equal(total, [2.0, 6.0, -2.0, 0.5])
    np.testing.assert_array_equal(difference, [1.0, -2.0, -4.0, 0.0])


def test_add_sub_int32(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([2**31 - 10, -5, 7, 0], dtype=np.int32)
    b = np.array([3, -5, 10, -1], dtype=np.int32)
    result = client.infer("add_sub_int32", add_sub_inputs(a, b, "INT32"), model_version="1")
    assert result.as_numpy("OUTPUT0").dtype == np.int32
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2**31 - 7, -10, 17, -1])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [2**31 - 13, 0, -3, 1])


def test_only_requested_output_is_returned(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    result = client.infer(
        "add_sub", add_sub_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")]
    )
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_string_ops(client: grpcclient.InferenceServerClient) -> None:
    words = ["hello", "", "héllo wörld", "MiXeD 123", "ß"]
    data = np.array([w.encode("utf-8") for w in words], dtype=np.object_)
    result = client.infer("string_ops", [infer_input("INPUT0", data, "BYTES")])
    assert result.get_output("UPPER").datatype == "BYTES"
    assert list(result.as_numpy("UPPER")) == [w.upper().encode("utf-8") for w in words]
    lengths = result.as_numpy("LENGTH")
    assert lengths.dtype == np.int32
    assert list(lengths) == [len(w.encode("utf-8")) for w in words]


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (1024, 4096), (2560, 4096)])
def test_identity_fp32_sizes(
    client: grpcclient.InferenceServerClient, shape: tuple[int, int]
) -> None:
    # (1024, 4096) is 16 MiB and (2560, 4096) 40 MiB: past the first arena segment.
    data = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    result = client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])
    output = result.as_numpy("OUTPUT0")
    assert output.shape == shape
    np.testing.assert_array_equal(output, data)


def test_large_tensors_repeatedly(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(11)
    for _ in range(4):
        data = rng.standard_normal((1024, 4096), dtype=np.float32)
        result = client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


STREAM_TIMEOUT_S = 60


def test_stream_infer_answers_in_order(examples_daemon: Daemon) -> None:
    client = examples_daemon.client()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(5):
            a = np.full(4, float(i), dtype=np.float32)
            client.async_stream_infer("add_sub", add_sub_inputs(a, a), request_id=f"s{i}")
        for i in range(5):
            result, error = answers.get(timeout=STREAM_TIMEOUT_S)
            assert error is None, str(error)
            assert result.get_response().id == f"s{i}"
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.0 * i] * 4)
    finally:
        client.stop_stream()


def test_stream_reports_errors_in_band(examples_daemon: Daemon) -> None:
    client = examples_daemon.client()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        a = np.zeros(4, dtype=np.float32)
        client.async_stream_infer("no_such_model", add_sub_inputs(a, a), request_id="bad")
        client.async_stream_infer("add_sub", add_sub_inputs(a + 1, a), request_id="good")
        result, error = answers.get(timeout=STREAM_TIMEOUT_S)
        assert result is None
        assert "Request for unknown model: 'no_such_model' is not found" in str(error)
        # The stream stays open after a failed request.
        result, error = answers.get(timeout=STREAM_TIMEOUT_S)
        assert error is None, str(error)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [1.0] * 4)
    finally:
        client.stop_stream()


# -- request validation (reference §2.6) ---------------------------------------------------------


def test_wrong_datatype(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(4, dtype=np.int32)
    inputs = [
        infer_input("INPUT0", a, "INT32"),
        infer_input("INPUT1", a.astype(np.float32), "FP32"),
    ]
    error = error_of(lambda: client.infer("add_sub", inputs, request_id="req-7"))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message() == (
        "[request id: req-7] inference input 'INPUT0' data-type is 'INT32', "
        "but model 'add_sub' expects 'FP32'"
    )


def test_wrong_shape(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(5, dtype=np.float32)
    error = error_of(lambda: client.infer("add_sub", add_sub_inputs(a, a)))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [5]"
        in error.message()
    )


def test_missing_input(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", np.zeros(4, dtype=np.float32), "FP32")]
    error = error_of(lambda: client.infer("add_sub", inputs))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "expected 2 inputs but got 1 inputs for model 'add_sub'" in error.message()


def test_unknown_input(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(4, dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("BOGUS", a, "FP32")]
    error = error_of(lambda: client.infer("add_sub", inputs))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected inference input 'BOGUS' for model 'add_sub'" in error.message()


def test_unknown_output(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(4, dtype=np.float32)
    outputs = [grpcclient.InferRequestedOutput("NOPE")]
    error = error_of(lambda: client.infer("add_sub", add_sub_inputs(a, a), outputs=outputs))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected inference output 'NOPE' for model 'add_sub'" in error.message()


def test_byte_size_mismatch(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(4, dtype=np.float32)
    inputs = add_sub_inputs(a, a)
    # tritonclient checks shapes itself, so put 12 bytes behind the declared [4] FP32 by hand.
    inputs[0]._raw_content = b"\0" * 12
    error = error_of(lambda: client.infer("add_sub", inputs))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12"
        in error.message()
    )


def test_infer_unknown_model_and_version(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros(4, dtype=np.float32)
    error = error_of(lambda: client.infer("no_such_model", add_sub_inputs(a, a)))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'no_such_model' is not found"

    error = error_of(lambda: client.infer("add_sub", add_sub_inputs(a, a), model_version="7"))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'add_sub' version 7 is not found"


def test_model_keeps_serving_after_bad_requests(client: grpcclient.InferenceServerClient) -> None:
    a = np.full(4, 2.0, dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [4.0] * 4)


# -- the example client --------------------------------------------------------------------------


def test_example_client_script(examples_daemon: Daemon) -> None:
    script = ROOT / "examples" / "client_add_sub.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--url", examples_daemon.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "PASS: add_sub" in completed.stdout


def test_the_readmes_llm_lines_run_as_written(examples_daemon: Daemon) -> None:
    """The README's curl and openai lines for tiny_llm, pointed at this daemon."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("An LLM-shaped model")
    block = readme[
        readme.index("```sh\n", start) + 6 : readme.index("```", readme.index("```sh\n", start) + 6)
    ]
    script = block.replace("localhost:8000", examples_daemon.http_url).replace(
        ".venv/bin/python", sys.executable
    )
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    out = completed.stdout
    assert 'data: {"model_name":"tiny_llm","model_version":"1"' in out  # generate_stream
    assert '"content": "olleh gib dlrow"' in out  # the chat completion
    # tiny_chat: "<s>[INST] Hello there, world! [/INST]" is 13 of Mistral's tokens.
    assert '"content": "Hello there, world!"' in out and '"prompt_tokens": 13' in out
    assert out.rstrip().endswith("olleh gib dlrow")  # the openai client's stream


def test_absent_extensions_answer_as_triton_does(examples_daemon: Daemon) -> None:
    client = examples_daemon.client()
    for call in [
        lambda: client.register_system_shared_memory("r", "/some_key", 64),
        lambda: client.get_system_shared_memory_status(),
        lambda: client.unregister_cuda_shared_memory(),
    ]:
        error = error_of(call)
        assert error.status() == "StatusCode.UNIMPLEMENTED"
        assert "--allow-client-shm=true" in error.message()
