"""The statistics extension: counts equal the requests sent; requests refused before the
model (invalid ones) are no failures, as in Triton."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from pbd_harness import EXAMPLE_MODELS, DaemonFactory, error_of, infer_input, make_repository

GOOD, BAD = 7, 3


def test_counts_and_durations_over_grpc_and_http(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    daemon = start_daemon(repo, settle=["add_sub"])
    client = daemon.client()
    a = np.arange(4, dtype=np.float32)
    for _ in range(GOOD):
        client.infer(
            "add_sub", [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
        )
    for _ in range(BAD):  # wrong shape: refused by validation, no failure (Triton: 0)
        error_of(lambda: client.infer("add_sub", [infer_input("INPUT0", a[:3], "FP32"),
                                                  infer_input("INPUT1", a, "FP32")]))  # fmt: skip

    (stats,) = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
    assert stats["name"] == "add_sub" and stats["version"] == "1"
    assert int(stats["inference_count"]) == GOOD and int(stats["execution_count"]) == GOOD
    infer = stats["inference_stats"]
    assert int(infer["success"]["count"]) == GOOD
    assert int(infer.get("fail", {}).get("count", 0)) == 0
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert int(infer[key]["count"]) == GOOD and int(infer[key]["ns"]) > 0, key
    assert int(infer["success"]["ns"]) >= int(infer["compute_infer"]["ns"])
    assert int(stats["last_inference"]) > 0

    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert [s["name"] for s in every] == ["add_sub"]
    unknown = error_of(lambda: client.get_inference_statistics("nope"))
    assert unknown.status() == "StatusCode.INVALID_ARGUMENT"
    assert "requested model 'nope' is not available" in unknown.message()
    version = error_of(lambda: client.get_inference_statistics("add_sub", "9"))
    assert "requested model version is not available for model 'add_sub'" in version.message()

    http = httpclient.InferenceServerClient(daemon.http_url)
    (over_http,) = http.get_inference_statistics("add_sub")["model_stats"]
    assert over_http["inference_count"] == GOOD  # a JSON number, as Triton writes it
    assert over_http["inference_stats"]["fail"]["count"] == 0
    with pytest.raises(Exception, match="requested model 'nope' is not available"):
        http.get_inference_statistics("nope")
