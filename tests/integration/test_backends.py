"""Python-based backends: ``backend: "scale"`` runs ``<--backend-directory>/scale/model.py``
(tests/integration/backends/scale) for every model that names it, as Triton 2.51 does:
the backend's auto_complete_config, Triton's initialize() arguments, its ModelConfig
(``runtime: "model.py"``), Triton's errors for a backend that is not there, and
``--backend-config`` as Triton applies it (the python backend's settings; a Python-based
backend's own are not passed on)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import TRITON_INIT_ARGS, Daemon, infer_input, make_repository, running_daemon

HERE = Path(__file__).resolve().parent
BACKENDS = HERE / "backends"
MODELS = HERE / "backend_models"
SHM_DEFAULT = 3 * 1024 * 1024  # --backend-config=python,shm-default-byte-size (pbd's: 4 MiB)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("backends")
    repository = make_repository(
        workdir, {"double": MODELS / "double", "triple": MODELS / "triple"}
    )
    (repository / "absent" / "1").mkdir(parents=True)
    (repository / "absent" / "config.pbtxt").write_text('backend: "absent"\nmax_batch_size: 0\n')
    args = (
        f"--backend-directory={BACKENDS}",
        "--backend-config=scale,factor=9",
        f"--backend-config=python,shm-default-byte-size={SHM_DEFAULT}",
    )
    with running_daemon(
        repository, workdir, *args, settle=["double", "triple", "absent"]
    ) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def _run(client: grpcclient.InferenceServerClient, model: str) -> tuple[np.ndarray, dict]:
    x = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    result = client.infer(model, [infer_input("INPUT", x, "FP32")])
    return result.as_numpy("OUTPUT"), json.loads(result.as_numpy("ARGS")[0])


def test_one_backend_serves_several_models(client: grpcclient.InferenceServerClient) -> None:
    out, _ = _run(client, "double")
    np.testing.assert_array_equal(out, [2.0, 4.0, 8.0])
    out, _ = _run(client, "triple")  # its inputs and outputs come from the backend's hook
    np.testing.assert_array_equal(out, [3.0, 6.0, 12.0])


def test_the_model_gets_tritons_arguments_and_import(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    _, seen = _run(client, "triple")
    args = seen["args"]
    # Triton's seven keys, nothing from --backend-config=scale,...: Triton 2.51 passes a
    # Python-based backend's model none of it either.
    assert set(args) == TRITON_INIT_ARGS
    assert args["model_repository"] == str(daemon.repository / "triple")
    assert (args["model_name"], args["model_version"]) == ("triple", "2")
    assert args["model_instance_name"] == "triple_0"
    assert json.loads(args["model_config"])["runtime"] == "model.py"
    # Imported as Triton's stub imports a backend's model.py: module "model" of the backend.
    assert seen["module"] == "model"
    assert seen["file"] == str(BACKENDS / "scale" / "model.py")


def test_model_config_says_runtime_model_py(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("triple", as_json=True)["config"]
    assert (config["backend"], config["runtime"]) == ("scale", "model.py")
    assert config.get("default_model_filename", "") == ""  # JSON leaves out empty fields
    assert [i["name"] for i in config["input"]] == ["INPUT"]


def test_a_backend_that_is_not_there(daemon: Daemon) -> None:
    entry = daemon.index()[("absent", "")]
    assert entry.state == "UNAVAILABLE"
    assert entry.reason.startswith(
        "unable to find backend library for backend 'absent', try specifying runtime on the "
        "model configuration."
    )


def test_backend_config_as_triton_applies_it(daemon: Daemon) -> None:
    # The python backend's shm-default-byte-size sizes the instances' first segments.
    sizes = set(daemon.segment_sizes().values())
    assert SHM_DEFAULT in sizes and 4 * 1024 * 1024 not in sizes
    # The backend's own setting is accepted and logged, as having no effect.
    assert "--backend-config=scale,factor=9 has no effect in pbd" in daemon.log()
