"""An output the model's config does not declare: Triton 2.51 drops it (checked with the same
model over gRPC and HTTP); so does pbd, and says so once at --log-verbose 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from pbd_harness import infer_input, running_daemon

CONFIG = """
name: "extra_out"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("EXTRA", x * 2)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def test_an_undeclared_output_does_not_reach_the_client(tmp_path: Path) -> None:
    model = tmp_path / "repository" / "extra_out"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    x = np.arange(3, dtype=np.float32)
    with running_daemon(
        model.parent, tmp_path, "--log-verbose", "1", settle=["extra_out"]
    ) as daemon:
        for _ in range(2):
            answer = daemon.client().infer("extra_out", [infer_input("INPUT0", x, "FP32")])
            assert [o.name for o in answer.get_response().outputs] == ["OUTPUT0"]
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), x)
        http = httpclient.InferenceServerClient(daemon.http_url)
        try:
            tensor = httpclient.InferInput("INPUT0", [3], "FP32")
            tensor.set_data_from_numpy(x)
            answer = http.infer("extra_out", [tensor])
        finally:
            http.close()
        assert [o["name"] for o in answer.get_response()["outputs"]] == ["OUTPUT0"]
    assert daemon.log().count("dropped output 'EXTRA'") == 1, daemon.log_tail()
