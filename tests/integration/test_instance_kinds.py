"""Instance kinds end to end: what a model sees in ``args`` and what happens without a GPU.

The GPU case runs only where an NVIDIA GPU is visible (``tests/gpu/run.sh`` runs it there);
the others run everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import TEST_MODELS, Daemon, error_of, infer_input, running_daemon

from pbd.gpus import visible_gpus

NO_GPU = not visible_gpus()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running_daemon(
        TEST_MODELS, tmp_path_factory.mktemp("kinds"), "--model-control-mode", "explicit"
    ) as d:
        yield d


def _config(kind: str) -> str:
    return json.dumps(
        {
            "name": "init_args",
            "backend": "python",
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": [
                {"name": "ARGS", "data_type": "TYPE_STRING", "dims": [1]},
                {"name": "MODEL_DIR", "data_type": "TYPE_STRING", "dims": [1]},
            ],
            "instance_group": [{"count": 1, "kind": kind}],
        }
    )


def _args(client: grpcclient.InferenceServerClient) -> dict[str, str]:
    result = client.infer("init_args", [infer_input("INPUT0", np.zeros(1, np.float32), "FP32")])
    return json.loads(result.as_numpy("ARGS")[0])


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: KIND_AUTO would pick it")
def test_kind_auto_runs_on_cpu_without_a_gpu(daemon: Daemon) -> None:
    client = daemon.control()
    client.load_model("init_args", config=_config("KIND_AUTO"))
    args = _args(client)
    assert args["model_instance_kind"] == "CPU" and args["model_instance_device_id"] == "0"


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_kind_gpu_without_a_gpu_fails_that_model_only(daemon: Daemon) -> None:
    client = daemon.control()
    # Not loaded before (a failed reload would leave the loaded model serving, as in Triton).
    client.unload_model("init_args")
    error = error_of(lambda: client.load_model("init_args", config=_config("KIND_GPU")))
    assert "has kind KIND_GPU, but no GPU is available" in error.message()
    assert not client.is_model_ready("init_args")
    client.load_model("optional_add")
    assert client.is_model_ready("optional_add")


@pytest.mark.gpu
@pytest.mark.skipif(NO_GPU, reason="no NVIDIA GPU visible (/proc/driver/nvidia/gpus is empty)")
def test_kind_gpu_instance_gets_its_device(daemon: Daemon) -> None:
    client = daemon.control()
    client.load_model("init_args", config=_config("KIND_GPU"))
    args = _args(client)
    assert args["model_instance_kind"] == "GPU"
    assert args["model_instance_device_id"] == str(visible_gpus()[0])
