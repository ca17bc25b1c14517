"""auto_complete_config: a model without config.pbtxt describes itself; conflicts with
config.pbtxt fail the load with Triton's messages; --disable-auto-complete-config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import (
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
)

MODELS = ("autocomplete_no_config", "autocomplete_conflict", "autocomplete_batch_conflict")


def _repository(root: Path) -> Path:
    repository = make_repository(
        root,
        {
            "autocomplete_no_config": TEST_MODELS / "autocomplete_no_config",
            "autocomplete_conflict": TEST_MODELS / "autocomplete_conflict",
            # The no-config model again, now with a config.pbtxt whose max_batch_size is larger
            # than the one auto_complete_config sets.
            "autocomplete_batch_conflict": TEST_MODELS / "autocomplete_no_config",
        },
    )
    (repository / "autocomplete_batch_conflict" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 16\n'
    )
    return repository


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("autocomplete")
    with running_daemon(_repository(workdir), workdir, settle=list(MODELS)) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def test_model_without_config_pbtxt_serves(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("autocomplete_no_config")
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    b = np.ones((1, 4), dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    result = client.infer("autocomplete_no_config", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_model_config_is_the_completed_one(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("autocomplete_no_config", as_json=True)["config"]
    assert config["name"] == "autocomplete_no_config"
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 4
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert all(i["data_type"] == "TYPE_FP32" for i in config["input"] + config["output"])
    assert "dynamic_batching" in config
    # Triton's defaults are filled in after auto-complete, as for any config.pbtxt.
    assert config["instance_group"][0]["count"] == 1


def test_model_metadata_is_the_completed_one(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("autocomplete_no_config")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [-1, 4]),
        ("INPUT1", "FP32", [-1, 4]),
    ]
    assert [t.name for t in metadata.outputs] == ["OUTPUT0", "OUTPUT1"]


def _reason(daemon: Daemon, model: str) -> str:
    entries = [e for (name, _), e in daemon.index().items() if name == model]
    assert entries and all(e.state == "UNAVAILABLE" for e in entries), entries
    return entries[0].reason


def test_datatype_conflict_fails_the_load_with_tritons_message(daemon: Daemon) -> None:
    assert daemon.client().is_model_ready("autocomplete_conflict") is False
    assert (
        "unable to load model 'autocomplete_conflict', configuration expects datatype "
        "TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32"
    ) in _reason(daemon, "autocomplete_conflict")


def test_max_batch_size_conflict_fails_the_load_with_tritons_message(daemon: Daemon) -> None:
    assert (
        "configuration specified max_batch_size 16, but in auto-complete-config function for "
        "model 'autocomplete_batch_conflict' specified max_batch_size 4"
    ) in _reason(daemon, "autocomplete_batch_conflict")


def test_the_daemon_keeps_serving_after_failed_auto_completes(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    assert client.is_server_live()
    # No worker is left over from the auto-complete runs: only the one instance serves.
    assert len(daemon.workers()) == 1


def test_disabled_auto_complete_needs_config_pbtxt(
    tmp_path: Path, start_daemon: DaemonFactory
) -> None:
    repository = make_repository(
        tmp_path, {"autocomplete_no_config": TEST_MODELS / "autocomplete_no_config"}
    )
    daemon = start_daemon(
        repository, "--disable-auto-complete-config", settle=["autocomplete_no_config"]
    )
    assert "missing config.pbtxt" in _reason(daemon, "autocomplete_no_config")


def test_disabled_auto_complete_serves_config_pbtxt_as_written(
    tmp_path: Path, start_daemon: DaemonFactory
) -> None:
    repository = make_repository(tmp_path, {"conflict": TEST_MODELS / "autocomplete_conflict"})
    config = repository / "conflict" / "config.pbtxt"
    config.write_text(
        config.read_text().replace("autocomplete_conflict", "conflict")
        + 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    daemon = start_daemon(repository, "--disable-auto-complete-config", settle=["conflict"])
    client = daemon.client()
    assert client.is_model_ready("conflict")
    inputs = client.get_model_config("conflict", as_json=True)["config"]["input"]
    assert inputs[0]["data_type"] == "TYPE_INT32"
    result = client.infer("conflict", [infer_input("INPUT0", np.zeros(4, np.int32), "INT32")])
    assert result.as_numpy("OUTPUT0").shape == (4,)


def test_a_broken_auto_complete_hook_names_the_model(
    tmp_path: Path, start_daemon: DaemonFactory
) -> None:
    repository = make_repository(tmp_path, {"bad_return": TEST_MODELS / "autocomplete_no_config"})
    model = repository / "bad_return" / "1" / "model.py"
    model.write_text(
        model.read_text().replace(
            "        return auto_complete_model_config\n", "        return None\n"
        )
    )
    daemon = start_daemon(repository, settle=["bad_return"])
    assert (
        "auto_complete_config function in model 'bad_return' must return a valid "
        "pb.ModelConfig object."
    ) in _reason(daemon, "bad_return")
    error = error_of(lambda: daemon.client().get_model_config("bad_return"))
    assert "bad_return" in error.message()
