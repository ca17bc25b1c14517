"""Model upload (``--allow-model-upload``): RepositoryModelLoad with ``file:`` parameters over
HTTP (base64) and gRPC (bytes), hostile uploads, atomic replacement, and model names checked
for every load (Triton 2.73's rule)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import (
    EXAMPLE_MODELS,
    Daemon,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
)
from tritonclient.utils import InferenceServerException

MAX_BYTES = 64 * 1024
CONFIG = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [1]}],
    }
)


def model_code(offset: int, fail: bool = False) -> bytes:
    """Y = X + offset; with ``fail``, initialize() raises."""
    return f"""
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        if {fail}:
            raise RuntimeError("this upload is broken")

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + {offset})]))
        return out
""".encode()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("upload")
    repository = make_repository(workdir, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    (workdir / "uploads").mkdir()
    args = (
        "--model-control-mode", "explicit",
        "--allow-model-upload", "true",
        "--model-upload-dir", str(workdir / "uploads"),
        "--model-upload-max-bytes", str(MAX_BYTES),
        "--model-upload-max-files", "4",
    )  # fmt: skip
    with running_daemon(repository, workdir, *args) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def grpc(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


@pytest.fixture(scope="module")
def http(daemon: Daemon) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(daemon.http_url)
    yield client
    client.close()


def upload_base(daemon: Daemon) -> Path:
    return Path(daemon.args[daemon.args.index("--model-upload-dir") + 1])


def uploaded_models(daemon: Daemon) -> list[str]:
    """The models whose uploads are on disk now."""
    return sorted(p.name for p in upload_base(daemon).glob("pbd-uploads-*/upload-*/*"))


def add(grpc: grpcclient.InferenceServerClient, model: str) -> int:
    result = grpc.infer(model, [infer_input("X", np.array([10], dtype=np.int32), "INT32")])
    return int(result.as_numpy("Y")[0])


def test_upload_over_http_and_grpc_then_unload(
    daemon: Daemon, grpc: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient
) -> None:
    http.load_model("by_http", config=CONFIG, files={"file:1/model.py": model_code(1)})
    grpc.load_model("by_grpc", config=CONFIG, files={"file:1/model.py": model_code(2)})
    assert http.is_model_ready("by_http") and grpc.is_model_ready("by_grpc")
    assert add(grpc, "by_http") == 11 and add(grpc, "by_grpc") == 12
    assert uploaded_models(daemon) == ["by_grpc", "by_http"]
    http.unload_model("by_http")
    grpc.unload_model("by_grpc")
    assert uploaded_models(daemon) == []


def test_a_failed_upload_leaves_the_old_model_serving(
    daemon: Daemon, grpc: grpcclient.InferenceServerClient
) -> None:
    grpc.load_model("swap", config=CONFIG, files={"file:1/model.py": model_code(1)})
    assert add(grpc, "swap") == 11
    broken = {"file:1/model.py": model_code(5, fail=True)}
    error = error_of(lambda: grpc.load_model("swap", config=CONFIG, files=broken))
    assert "this upload is broken" in error.message()
    assert grpc.is_model_ready("swap") and add(grpc, "swap") == 11
    assert uploaded_models(daemon) == ["swap"]  # the broken one is gone
    grpc.load_model("swap", config=CONFIG, files={"file:1/model.py": model_code(2)})
    assert add(grpc, "swap") == 12
    assert uploaded_models(daemon) == ["swap"]  # the replaced one is gone
    grpc.unload_model("swap")


POLL = "failed to load 'hostile', failed to poll from model repository: invalid file parameter"


@pytest.mark.parametrize(
    ("files", "status", "message"),
    [
        ({"file:../../escape.py": b"x"}, "INTERNAL", f"{POLL} 'file:../../escape.py'"),
        ({"file:1/../../../escape.py": b"x"}, "INTERNAL", "the path has '..'"),
        ({"file://tmp/escape.py": b"x"}, "INTERNAL", "the path has an empty part"),
        ({"file:1/a\0b": b"x"}, "INTERNAL", "the path contains a NUL character"),
        ({"file:1/" + "n" * 300: b"x"}, "INTERNAL", "is longer than 255 bytes"),
        ({"file:1/big.bin": b"\0" * (MAX_BYTES + 1)}, "INVALID_ARGUMENT",
         f"more than --model-upload-max-bytes ({MAX_BYTES})"),
        ({f"file:1/f{i}": b"" for i in range(4)}, "INVALID_ARGUMENT",
         "5 files, more than --model-upload-max-files (4)"),
    ],
)  # fmt: skip
def test_hostile_uploads_are_refused_and_write_nothing(
    daemon: Daemon,
    grpc: grpcclient.InferenceServerClient,
    files: dict[str, bytes],
    status: str,
    message: str,
) -> None:
    files = {"file:1/model.py": model_code(1), **files}
    error = error_of(lambda: grpc.load_model("hostile", config=CONFIG, files=files))
    assert error.status() == f"StatusCode.{status}" and message in error.message(), error
    assert not grpc.is_model_ready("hostile")
    assert uploaded_models(daemon) == []
    assert not list(upload_base(daemon).parent.rglob("escape.py"))
    assert not Path("/tmp/escape.py").exists()


def test_hostile_uploads_over_http(http: httpclient.InferenceServerClient) -> None:
    traversal = {"file:1/model.py": model_code(1), "file:../escape.py": b"x"}
    with pytest.raises(InferenceServerException, match=re.escape(POLL)):
        http.load_model("hostile", config=CONFIG, files=traversal)
    huge = {"file:1/model.py": model_code(1) + b"#" * MAX_BYTES}
    with pytest.raises(InferenceServerException, match="--model-upload-max-bytes"):
        http.load_model("hostile", config=CONFIG, files=huge)
    # Triton's answer when the files come without a config.
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        http.load_model("hostile", files={"file:1/model.py": model_code(1)})
    assert not http.is_model_ready("hostile")


def test_model_names_are_checked_for_every_load(
    grpc: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient
) -> None:
    files = {"file:1/model.py": model_code(1)}
    for name in ["model;test", "model|test", "model$test", "model`id`", "model(test)",
                 "model'test'", 'model"test"', "model*test", "model~test", "model!test",
                 "model test", "model\ttest"]:  # fmt: skip
        error = error_of(lambda n=name: grpc.load_model(n, config=CONFIG, files=files))
        assert "Invalid stub name: contains invalid characters" in error.message(), name
        error = error_of(lambda n=name: grpc.load_model(n))  # no upload: the same rule
        assert "Invalid stub name: contains invalid characters" in error.message(), name
    for name in ["TestModel123", "model-with-hyphens", "model_with_underscores"]:
        http.load_model(name, config=CONFIG, files=files)
        assert add(grpc, name) == 11
        http.unload_model(name)


def test_upload_is_off_unless_asked_for(tmp_path: Path) -> None:
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    with running_daemon(repository, tmp_path, "--model-control-mode", "explicit") as daemon:
        client = daemon.client()
        files = {"file:1/model.py": model_code(1)}
        error = error_of(lambda: client.load_model("m", config=CONFIG, files=files))
        assert error.status() == "StatusCode.UNIMPLEMENTED"
        assert "--allow-model-upload" in error.message()
