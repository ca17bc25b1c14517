"""Explicit model control: load_model / unload_model, readiness, and load with a config override."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import (
    EXAMPLE_MODELS,
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("explicit")
    repository = make_repository(
        workdir,
        {
            "add_sub": EXAMPLE_MODELS / "add_sub",
            "add_sub_int32": EXAMPLE_MODELS / "add_sub_int32",
            "string_ops": EXAMPLE_MODELS / "string_ops",
            "fail_initialize": TEST_MODELS / "fail_initialize",
        },
    )
    args = ("--model-control-mode", "explicit", "--load-model", "add_sub")
    with running_daemon(repository, workdir, *args, settle=["add_sub"]) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def add_int32(client: grpcclient.InferenceServerClient) -> np.ndarray:
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    inputs = [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", a, "INT32")]
    return client.infer("add_sub_int32", inputs).as_numpy("OUTPUT0")


def wait_no_workers(daemon: Daemon, model: str) -> None:
    wait_until(lambda: not daemon.workers_of(model), SETTLE_TIMEOUT_S, f"{model} workers to exit")


def test_only_the_startup_model_is_loaded(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    assert client.is_model_ready("add_sub") is True
    assert client.is_model_ready("add_sub_int32") is False
    assert client.is_server_ready() is True
    index = client.get_model_repository_index()
    by_name = {m.name: m for m in index.models}
    assert set(by_name) == {"add_sub", "add_sub_int32", "string_ops", "fail_initialize"}
    assert (by_name["add_sub"].version, by_name["add_sub"].state) == ("1", "READY")
    # A model never loaded is listed by name only.
    assert (by_name["string_ops"].version, by_name["string_ops"].state) == ("", "")
    assert [name.split("/")[0] for name in daemon.workers().values()] == ["add_sub"]


def test_load_then_unload(client: grpcclient.InferenceServerClient, daemon: Daemon) -> None:
    client.load_model("add_sub_int32")
    assert client.is_model_ready("add_sub_int32") is True
    np.testing.assert_array_equal(add_int32(client), [2, 4, 6, 8])
    assert list(daemon.workers_of("add_sub_int32").values()) == [
        "add_sub_int32/1/add_sub_int32_0_0"
    ]

    client.unload_model("add_sub_int32")
    wait_until(
        lambda: not client.is_model_ready("add_sub_int32"), SETTLE_TIMEOUT_S, "unload to finish"
    )
    wait_no_workers(daemon, "add_sub_int32")
    error = error_of(lambda: add_int32(client))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message().startswith("Request for unknown model: 'add_sub_int32'")
    assert client.is_model_ready("add_sub") is True


def test_reload_after_unload(client: grpcclient.InferenceServerClient, daemon: Daemon) -> None:
    client.load_model("add_sub_int32")
    np.testing.assert_array_equal(add_int32(client), [2, 4, 6, 8])
    before = set(daemon.workers_of("add_sub_int32"))
    client.unload_model("add_sub_int32")
    wait_no_workers(daemon, "add_sub_int32")
    client.load_model("add_sub_int32")
    after = set(daemon.workers_of("add_sub_int32"))
    assert len(after) == 1 and after.isdisjoint(before)
    np.testing.assert_array_equal(add_int32(client), [2, 4, 6, 8])


def test_load_with_config_override(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    config = {
        "name": "string_ops",
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [-1]}],
        "output": [
            {"name": "UPPER", "data_type": "TYPE_STRING", "dims": [-1]},
            {"name": "LENGTH", "data_type": "TYPE_INT32", "dims": [-1]},
        ],
        "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    }
    client.load_model("string_ops", config=json.dumps(config))
    assert client.is_model_ready("string_ops") is True
    served = client.get_model_config("string_ops", as_json=True)["config"]
    assert [g["count"] for g in served["instance_group"]] == [2]
    assert sorted(daemon.workers_of("string_ops").values()) == [
        "string_ops/1/string_ops_0_0",
        "string_ops/1/string_ops_0_1",
    ]
    data = np.array([b"abc", b""], dtype=np.object_)
    result = client.infer("string_ops", [infer_input("INPUT0", data, "BYTES")])
    assert result.as_numpy("UPPER").tolist() == [b"ABC", b""]
    client.unload_model("string_ops")
    wait_no_workers(daemon, "string_ops")


def test_an_override_cannot_name_code_outside_the_repository(
    client: grpcclient.InferenceServerClient, daemon: Daemon, tmp_path: Path
) -> None:
    """Issue 18, finding 4: neither an environment nor the model file may leave the
    repository, absolute or through '..'; nothing outside runs."""
    ran = tmp_path / "ran"
    outside = tmp_path / "env"
    (outside / "bin").mkdir(parents=True)
    for name in ("python3", "python"):
        script = outside / "bin" / name
        script.write_text(f'#!/bin/sh\ntouch {ran}\nexec {sys.executable} "$@"\n')
        script.chmod(0o755)
    (tmp_path / "evil.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    config = client.get_model_config("add_sub", as_json=True)["config"]
    config = {k: v for k, v in config.items() if k in ("name", "backend", "input", "output")}
    # A bad environment fails the version's load, a bad file name the config itself: both
    # INVALID_ARGUMENT, as Triton answers a load that failed.
    bad = {
        "EXECUTION_ENV_PATH": [str(outside), "$$TRITON_MODEL_DIRECTORY/../../env"],
        "default_model_filename": [f"../../{'../' * 12}{tmp_path}/evil.py", "x/model.py"],
    }
    for field, values in bad.items():
        for value in values:
            override = dict(config)
            if field == "default_model_filename":
                override[field] = value
            else:
                override["parameters"] = {field: {"string_value": value}}
            error = error_of(lambda o=override: client.load_model("add_sub", config=json.dumps(o)))
            assert error.status() == "StatusCode.INVALID_ARGUMENT", error
            assert field in error.message() and value in error.message(), error.message()
    assert not ran.exists()
    client.load_model("add_sub")  # the repository's own config loads again
    np.testing.assert_array_equal(
        client.infer(
            "add_sub",
            [
                infer_input("INPUT0", np.ones(4, np.float32), "FP32"),
                infer_input("INPUT1", np.ones(4, np.float32), "FP32"),
            ],
        ).as_numpy("OUTPUT0"),
        [2, 2, 2, 2],
    )


def test_a_model_name_too_long_for_a_file_is_not_in_the_repository(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Issue 18, finding 7: was UNKNOWN "File name too long"."""
    name = "m" * 300
    error = error_of(lambda: client.load_model(name))
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message() == f"failed to load '{name}', failed to poll from model repository"


def test_load_of_a_failing_model(client: grpcclient.InferenceServerClient, daemon: Daemon) -> None:
    error = error_of(lambda: client.load_model("fail_initialize"))
    assert "init exploded" in error.message()
    assert client.is_model_ready("fail_initialize") is False
    entry = daemon.index()[("fail_initialize", "1")]
    assert entry.state == "UNAVAILABLE"
    assert "init exploded" in entry.reason
    wait_no_workers(daemon, "fail_initialize")
    assert client.is_model_ready("add_sub") is True


def test_load_of_a_model_not_in_the_repository(client: grpcclient.InferenceServerClient) -> None:
    error = error_of(lambda: client.load_model("does_not_exist"))
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message() == (
        "failed to load 'does_not_exist', failed to poll from model repository"
    )


def test_unload_the_startup_model(client: grpcclient.InferenceServerClient, daemon: Daemon) -> None:
    client.unload_model("add_sub")
    wait_until(lambda: not client.is_model_ready("add_sub"), SETTLE_TIMEOUT_S, "add_sub unload")
    wait_no_workers(daemon, "add_sub")
    entry = daemon.index()[("add_sub", "1")]
    assert entry.state == "UNAVAILABLE"
    client.load_model("add_sub")
    assert client.is_model_ready("add_sub") is True


def test_model_added_to_the_repository_can_be_loaded(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    shutil.copytree(TEST_MODELS / "optional_add", daemon.repository / "optional_add")
    client.load_model("optional_add")
    a = np.array([1.0, 2.0], dtype=np.float32)
    result = client.infer("optional_add", [infer_input("A", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("SUM"), a)


@pytest.mark.parametrize(
    ("model", "grpc_status", "http_status", "message"),
    [
        # A version whose model.py does not compile: Triton's "load failed" answer.
        ("syntax_error", "StatusCode.INVALID_ARGUMENT", "400", "SyntaxError"),
        # A config.pbtxt Triton cannot read: its code (it answers "failed to poll from model
        # repository"), pbd's message naming the line.
        ("bad_config", "StatusCode.INTERNAL", "500", "config.pbtxt: invalid model configuration"),
    ],
)
def test_load_failures_answer_tritons_codes_over_both_protocols(
    client: grpcclient.InferenceServerClient,
    daemon: Daemon,
    model: str,
    grpc_status: str,
    http_status: str,
    message: str,
) -> None:
    """Checked against Triton 2.51 (docs/models.md, "Loads")."""
    if not (daemon.repository / model).exists():
        shutil.copytree(TEST_MODELS / model, daemon.repository / model)
    error = error_of(lambda: client.load_model(model))
    assert error.status() == grpc_status, error
    assert message in error.message()
    http = httpclient.InferenceServerClient(daemon.http_url)
    try:
        error = error_of(lambda: http.load_model(model))
    finally:
        http.close()
    assert error.status() == http_status, error
    assert message in error.message()
    assert daemon.index()[(model, "1" if model == "syntax_error" else "")].state == "UNAVAILABLE"


def test_an_unload_during_a_load_waits_for_it_and_the_model_stays_listed(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    """As Triton 2.51: a load goes on when its client stops waiting; an unload asked meanwhile
    answers once the load has ended and the model is unloaded. The model stays in the index
    (UNAVAILABLE "unloaded"), and both steps are logged. pbd used to drop the load with its
    client, and the unload then made the model vanish from the index, silently."""
    model_dir = daemon.repository / "gated"
    if not model_dir.exists():
        shutil.copytree(TEST_MODELS / "gated", model_dir)
    hold = model_dir / "hold_initialize"  # the model's initialize() waits while it exists
    hold.write_text("")
    try:
        error = error_of(lambda: client.load_model("gated", client_timeout=1.0))
        assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
        assert daemon.index()[("gated", "1")].state == "LOADING"
        with ThreadPoolExecutor(max_workers=1) as pool:
            unloaded = pool.submit(client.unload_model, "gated")
            wait_until(
                lambda: "unloading model 'gated' once its load in progress ends" in daemon.log(),
                SETTLE_TIMEOUT_S,
                "the unload to wait",
            )
            assert not unloaded.done()
            hold.unlink()
            unloaded.result(timeout=SETTLE_TIMEOUT_S)
    finally:
        hold.unlink(missing_ok=True)
    entry = daemon.index()[("gated", "1")]
    assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
    assert "loaded model 'gated' versions [1]" in daemon.log()
    assert "unloaded model 'gated'" in daemon.log()
    wait_no_workers(daemon, "gated")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_unload_goes_on_when_its_client_stops_waiting(
    start_daemon: DaemonFactory, tmp_path: Path, protocol: str
) -> None:
    """An unload whose client's deadline passes while the model finishes a request ends as
    every unload does (the model unloaded, its worker gone), never half-way, over gRPC as over
    HTTP: the repository runs a client's unload to its end, as it runs a client's load."""
    repository = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    args = ("--model-control-mode", "explicit", "--load-model", "gated")
    daemon = start_daemon(repository, *args, settle=["gated"])
    gate = tmp_path / "gate"
    gate.write_text("")
    tensors = [
        infer_input("ID", np.array([7], dtype=np.int32), "INT32"),
        infer_input("GATE", np.array([str(gate).encode()], dtype=np.object_), "BYTES"),
    ]
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(daemon.client().infer, "gated", tensors, client_timeout=60)
        wait_until(
            lambda: (tmp_path / "gate.executing").exists(), SETTLE_TIMEOUT_S, "the request to run"
        )
        if protocol == "grpc":
            error = error_of(lambda: daemon.client().unload_model("gated", client_timeout=1.0))
            assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
        else:
            http = httpclient.InferenceServerClient(daemon.http_url, network_timeout=1.0)
            with pytest.raises(Exception, match="timed out"):
                http.unload_model("gated")
            http.close()
        gate.unlink()
        assert held.result(timeout=SETTLE_TIMEOUT_S).as_numpy("ID").tolist() == [7]
    def unloaded() -> bool:
        entry = daemon.index().get(("gated", "1"))
        return entry is not None and entry.state == "UNAVAILABLE"

    wait_until(unloaded, SETTLE_TIMEOUT_S, "the unload to end")
    assert daemon.index()[("gated", "1")].reason == "unloaded"
    wait_no_workers(daemon, "gated")
    daemon.client().load_model("gated")  # and it loads again
    assert daemon.client().is_model_ready("gated")


def test_shutdown_cancels_a_load_its_client_left(tmp_path: Path) -> None:
    repository = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    (repository / "gated" / "hold_initialize").write_text("")
    with running_daemon(repository, tmp_path, "--model-control-mode", "explicit") as daemon:
        client = daemon.client()
        error_of(lambda: client.load_model("gated", client_timeout=1.0))
        assert daemon.index()[("gated", "1")].state == "LOADING"
        assert daemon.stop() == 0
    assert "loading model 'gated' was cancelled" in daemon.log()
