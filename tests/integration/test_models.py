"""The test repository in ``none`` mode: datatypes, optional inputs, async execute, versions,
initialize() arguments, errors raised by models, and models that fail to load."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import TEST_MODELS, TRITON_INIT_ARGS, Daemon, error_of, infer_input

SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([True, False, True, True]),
    "UINT8": np.array([0, 1, 254, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 2**64 - 1, 12345678901234567], dtype=np.uint64),
    "INT8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), -7, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.5, -2.0, 65504.0, np.inf], dtype=np.float16),
    "FP32": np.array([1.25, -0.0, 3.4e38, -np.inf, 1e-45], dtype=np.float32),
    "FP64": np.array([np.pi, -1e308, 5e-324], dtype=np.float64),
    "BYTES": np.array(
        [b"", "héllo wörld ✓".encode(), b"\x00\xff\x01", b"plain", "日本語".encode()],
        dtype=np.object_,
    ),
}


@pytest.fixture(scope="module")
def client(models_daemon: Daemon) -> grpcclient.InferenceServerClient:
    return models_daemon.client()


def assert_same_tensor(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    if expected.dtype == np.object_:
        assert actual.tolist() == expected.tolist()
    else:
        assert actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)


# -- every datatype ------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_identity_of_one_datatype(client: grpcclient.InferenceServerClient, datatype: str) -> None:
    data = SAMPLES[datatype]
    result = client.infer("identity_all", [infer_input(f"IN_{datatype}", data, datatype)])
    outputs = result.get_response().outputs
    assert [(o.name, o.datatype, list(o.shape)) for o in outputs] == [
        (f"OUT_{datatype}", datatype, [len(data)])
    ]
    assert_same_tensor(result.as_numpy(f"OUT_{datatype}"), data)


def test_identity_of_every_datatype_at_once(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input(f"IN_{t}", data, t) for t, data in SAMPLES.items()]
    result = client.infer("identity_all", inputs)
    assert sorted(o.name for o in result.get_response().outputs) == sorted(
        f"OUT_{t}" for t in SAMPLES
    )
    for datatype, data in SAMPLES.items():
        assert_same_tensor(result.as_numpy(f"OUT_{datatype}"), data)


@pytest.mark.parametrize("datatype", ["FP32", "BYTES", "BOOL"])
def test_zero_element_tensors(client: grpcclient.InferenceServerClient, datatype: str) -> None:
    data = SAMPLES[datatype][:0]
    result = client.infer("identity_all", [infer_input(f"IN_{datatype}", data, datatype)])
    output = result.as_numpy(f"OUT_{datatype}")
    assert output.shape == (0,)


def test_requested_outputs_subset(client: grpcclient.InferenceServerClient) -> None:
    inputs = [
        infer_input("IN_INT32", SAMPLES["INT32"], "INT32"),
        infer_input("IN_BYTES", SAMPLES["BYTES"], "BYTES"),
    ]
    result = client.infer(
        "identity_all", inputs, outputs=[grpcclient.InferRequestedOutput("OUT_BYTES")]
    )
    assert [o.name for o in result.get_response().outputs] == ["OUT_BYTES"]
    assert_same_tensor(result.as_numpy("OUT_BYTES"), SAMPLES["BYTES"])


def test_identity_all_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("identity_all")
    inputs = {t.name: (t.datatype, list(t.shape)) for t in metadata.inputs}
    assert inputs == {f"IN_{t}": (t, [-1]) for t in SAMPLES}
    config = client.get_model_config("identity_all").config
    assert all(i.optional for i in config.input)


def test_malformed_bytes_input(client: grpcclient.InferenceServerClient) -> None:
    tensor = infer_input("IN_BYTES", SAMPLES["BYTES"][:1], "BYTES")
    tensor._raw_content = b"\x05\x00\x00"  # a length prefix cut short
    error = error_of(lambda: client.infer("identity_all", [tensor]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "incomplete string length indicator" in error.message()

    tensor = infer_input("IN_BYTES", SAMPLES["BYTES"][:2], "BYTES")
    tensor._raw_content = b"\x01\x00\x00\x00a"  # shape [2], one element
    error = error_of(lambda: client.infer("identity_all", [tensor]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "expected 2 string elements" in error.message()


def test_wrong_rank(client: grpcclient.InferenceServerClient) -> None:
    data = np.zeros((2, 2), dtype=np.float32)
    error = error_of(lambda: client.infer("identity_all", [infer_input("IN_FP32", data, "FP32")]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'IN_FP32' for model 'identity_all'" in error.message()


# -- optional inputs -----------------------------------------------------------------------------


def test_optional_input_omitted(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    result = client.infer("optional_add", [infer_input("A", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("SUM"), a)


def test_optional_input_given(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    result = client.infer(
        "optional_add", [infer_input("A", a, "FP32"), infer_input("B", b, "FP32")]
    )
    np.testing.assert_array_equal(result.as_numpy("SUM"), [11.0, 22.0, 33.0])


def test_required_input_missing(client: grpcclient.InferenceServerClient) -> None:
    b = np.array([1.0], dtype=np.float32)
    error = error_of(lambda: client.infer("optional_add", [infer_input("B", b, "FP32")]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "optional_add" in error.message()
    assert "'A'" in error.message()


# -- async execute, versions, initialize() arguments ---------------------------------------------


def test_async_execute(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([1.0, -2.5, 4.0], dtype=np.float32)
    result = client.infer("async_model", [infer_input("INPUT0", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)


def _version_served(client: grpcclient.InferenceServerClient, version: str) -> tuple[str, int]:
    inputs = [infer_input("INPUT0", np.array([0], dtype=np.int32), "INT32")]
    result = client.infer("versioned", inputs, model_version=version)
    return result.get_response().model_version, int(result.as_numpy("VERSION")[0])


def test_latest_two_versions_are_served(client: grpcclient.InferenceServerClient) -> None:
    assert _version_served(client, "") == ("3", 3)
    assert _version_served(client, "3") == ("3", 3)
    assert _version_served(client, "2") == ("2", 2)
    error = error_of(lambda: _version_served(client, "1"))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'versioned' version 1 is not found"


def test_versions_in_metadata_readiness_and_index(
    client: grpcclient.InferenceServerClient, models_daemon: Daemon
) -> None:
    assert sorted(client.get_model_metadata("versioned").versions) == ["2", "3"]
    assert list(client.get_model_metadata("versioned", "2").versions) == ["2"]
    assert client.is_model_ready("versioned") is True
    assert client.is_model_ready("versioned", "3") is True
    assert client.is_model_ready("versioned", "2") is True
    assert client.is_model_ready("versioned", "1") is False
    index = models_daemon.index()
    assert index[("versioned", "3")].state == "READY"
    assert index[("versioned", "2")].state == "READY"
    assert ("versioned", "1") not in index or index[("versioned", "1")].state != "READY"
    config = client.get_model_config("versioned", as_json=True)["config"]
    assert config["version_policy"] == {"latest": {"num_versions": 2}}


def test_initialize_arguments(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", np.zeros(1, dtype=np.float32), "FP32")]
    result = client.infer("init_args", inputs)
    args = json.loads(result.as_numpy("ARGS")[0])
    assert set(args) >= TRITON_INIT_ARGS
    assert all(isinstance(v, str) for v in args.values())
    assert args["model_name"] == "init_args"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "init_args_0_0"
    assert args["model_instance_device_id"] == "0"
    model_dir = (TEST_MODELS / "init_args").resolve()
    assert Path(args["model_repository"]).resolve() == model_dir
    config = json.loads(args["model_config"])
    assert config["name"] == "init_args"
    assert [i["name"] for i in config["input"]] == ["INPUT0"]
    # Triton derives get_model_dir() from the model file's location; accept the model
    # directory or its version directory, nothing else.
    got_dir = Path(result.as_numpy("MODEL_DIR")[0].decode()).resolve()
    assert got_dir in (model_dir, model_dir / "1")


# -- errors from models --------------------------------------------------------------------------


def test_exception_in_execute_fails_only_that_request(
    client: grpcclient.InferenceServerClient, models_daemon: Daemon
) -> None:
    [worker_before] = models_daemon.workers_of("raise_in_execute")
    bad = [infer_input("INPUT0", np.array([-1], dtype=np.int32), "INT32")]
    error = error_of(lambda: client.infer("raise_in_execute", bad))
    assert error.status() == "StatusCode.INTERNAL"
    assert "Failed to process the request(s) for model" in error.message()
    assert "boom from execute" in error.message()

    good = [infer_input("INPUT0", np.array([5], dtype=np.int32), "INT32")]
    result = client.infer("raise_in_execute", good)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [5])
    assert list(models_daemon.workers_of("raise_in_execute")) == [worker_before]


@pytest.mark.parametrize(
    ("mode", "status", "text"),
    [
        (0, "StatusCode.NOT_FOUND", "bad thing"),
        (1, "StatusCode.INTERNAL", "x"),
        (2, "StatusCode.UNAVAILABLE", "come back later"),
        (3, "StatusCode.INVALID_ARGUMENT", "wrong argument"),
        (4, "StatusCode.UNIMPLEMENTED", "not supported here"),
    ],
)
def test_triton_error_code_reaches_the_client(
    client: grpcclient.InferenceServerClient, mode: int, status: str, text: str
) -> None:
    inputs = [infer_input("MODE", np.array([mode], dtype=np.int32), "INT32")]
    error = error_of(lambda: client.infer("triton_error_model", inputs))
    assert error.status() == status
    assert error.message().endswith(text)


def test_triton_error_model_also_answers(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("MODE", np.array([9], dtype=np.int32), "INT32")]
    result = client.infer("triton_error_model", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [9])


# -- models that fail to load --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "reason_parts"),
    [
        ("fail_initialize", ["init exploded"]),
        ("syntax_error", ["model.py"]),
        ("bad_config", ["config.pbtxt"]),
    ],
)
def test_broken_model_is_unavailable_with_reason(
    client: grpcclient.InferenceServerClient,
    models_daemon: Daemon,
    model: str,
    reason_parts: list[str],
) -> None:
    assert client.is_model_ready(model) is False
    entries = [e for (name, _), e in models_daemon.index().items() if name == model]
    assert entries, f"{model} missing from the repository index"
    for entry in entries:
        assert entry.state == "UNAVAILABLE"
        for part in reason_parts:
            assert part in entry.reason
    error = error_of(lambda: client.get_model_metadata(model))
    assert error.message().startswith(f"Request for unknown model: '{model}'")


def test_infer_on_a_failed_model(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", np.zeros(1, dtype=np.float32), "FP32")]
    error = error_of(lambda: client.infer("fail_initialize", inputs))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == (
        "Request for unknown model: 'fail_initialize' has no available versions"
    )


def test_good_models_serve_beside_broken_ones(
    client: grpcclient.InferenceServerClient, models_daemon: Daemon
) -> None:
    good = sorted(
        {"identity_all", "optional_add", "raise_in_execute", "triton_error_model", "sleepy"}
        | {"multi_instance", "async_model", "versioned", "init_args"}
    )
    for model in good:
        assert client.is_model_ready(model) is True, model
    # Strict readiness: the server is not ready while some of its models failed to load.
    assert client.is_server_ready() is False
    assert client.is_server_live() is True
    instances = {name for name in models_daemon.workers().values()}
    assert not any(name.startswith(("fail_initialize/", "syntax_error/")) for name in instances)


def test_none_mode_rejects_load_and_unload(client: grpcclient.InferenceServerClient) -> None:
    for call in (lambda: client.load_model("sleepy"), lambda: client.unload_model("sleepy")):
        error = error_of(call)
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == (
            "explicit model load / unload is not allowed if polling is enabled"
        )
    assert client.is_model_ready("sleepy") is True


# -- instances -----------------------------------------------------------------------------------


def test_worker_processes_are_named_by_instance(models_daemon: Daemon) -> None:
    instances = sorted(models_daemon.workers().values())
    assert "multi_instance/1/multi_instance_0_0" in instances
    assert "multi_instance/1/multi_instance_0_1" in instances
    assert "sleepy/1/sleepy_0_0" in instances
    assert "versioned/3/versioned_0_0" in instances
    assert "versioned/2/versioned_0_0" in instances
    assert not any(name.startswith("versioned/1/") for name in instances)
    assert models_daemon.shm_segments() != []


def test_concurrent_burst_uses_both_instances(
    client: grpcclient.InferenceServerClient, models_daemon: Daemon
) -> None:
    workers = models_daemon.workers_of("multi_instance")
    assert len(workers) == 2

    def one(_: int) -> tuple[int, str]:
        inputs = [infer_input("DELAY_MS", np.array([150], dtype=np.int32), "INT32")]
        result = client.infer("multi_instance", inputs)
        return int(result.as_numpy("PID")[0]), result.as_numpy("INSTANCE")[0].decode()

    seen: set[tuple[int, str]] = set()
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):  # bounded: a few bursts of 8
            seen |= set(pool.map(one, range(8)))
            if len(seen) == 2:
                break
    assert {pid for pid, _ in seen} == set(workers)
    assert {name for _, name in seen} == {"multi_instance_0_0", "multi_instance_0_1"}
    for pid, name in seen:
        assert workers[pid] == f"multi_instance/1/{name}"
