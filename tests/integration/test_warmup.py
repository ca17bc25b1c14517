"""model_warmup: every instance runs the config's samples before it takes requests, as Triton
2.51 does, and a sample that fails fails the load with Triton's message and status (the
expected texts are what Triton 2.51 answered for the same configs)."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import Daemon, error_of, infer_input, make_repository, running_daemon, wait_until

MODELS = Path(__file__).resolve().parent / "warmup_models"
MODEL = MODELS / "warmup_record"
FILE_A = struct.pack("<4f", 1.5, 2.5, 3.5, 4.5) + b"ignored: past the 16 bytes asked for"
FILE_S = b"".join(struct.pack("<I", len(s)) + s for s in (b"hello", b"wo"))
ZEROS = {"A": ["float32", [1, 4], [0.0] * 4], "S": ["object", [1, 2], ["", ""]]}
FROM_FILES = {
    "A": ["float32", [1, 4], [1.5, 2.5, 3.5, 4.5]],
    "S": ["object", [1, 2], ["hello", "wo"]],
}

HEAD = """backend: "python"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "S" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "LOG" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ZERO_A = 'inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }'
ZERO_S = 'inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } }'


def _variant(batch_size: int = 2, inputs: str = f"{ZERO_A} {ZERO_S}", extra: str = "") -> str:
    sample = f'{{ name: "s1" batch_size: {batch_size} {inputs} }}'
    return f"{HEAD}model_warmup [ {sample} ]\n{extra}"


def _mode(mode: str) -> str:
    return f'parameters {{ key: "mode" value: {{ string_value: "{mode}" }} }}\n'


# Model -> its config: the failures Triton 2.51 was asked the same way.
VARIANTS = {
    "warmup_raise": _variant(extra=_mode("raise")),
    "warmup_error": _variant(extra=_mode("error")),
    "warmup_big_batch": _variant(batch_size=9),
    "warmup_no_file": _variant(
        inputs=f'inputs {{ key: "A" value: {{ data_type: TYPE_FP32 dims: [ 4 ] input_data_file: '
        f'"missing.bin" }} }} {ZERO_S}'
    ),
    "warmup_short_file": _variant(
        inputs=f'inputs {{ key: "A" value: {{ data_type: TYPE_FP32 dims: [ 4 ] input_data_file: '
        f'"s.bin" }} }} {ZERO_S}'
    ),
    "warmup_variable": _variant(inputs=ZERO_A.replace("[ 4 ]", "[ -1 ]") + " " + ZERO_S),
    "warmup_wrong_type": _variant(inputs=ZERO_A.replace("TYPE_FP32", "TYPE_INT32") + " " + ZERO_S),
    "warmup_missing_input": _variant(inputs=ZERO_A),
    "warmup_decoupled": _variant(extra="model_transaction_policy { decoupled: true }\n"),
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("warmup")
    models = {name: MODEL for name in ["warmup_record", *VARIANTS]}
    repository = make_repository(workdir, {**models, "warmup_hold": MODELS / "warmup_hold"})
    for name, config in VARIANTS.items():
        (repository / name / "config.pbtxt").write_text(config)
    for name in ("warmup_record", "warmup_short_file"):
        (repository / name / "warmup").mkdir()
        (repository / name / "warmup" / "a.bin").write_bytes(FILE_A)
        (repository / name / "warmup" / "s.bin").write_bytes(FILE_S)
    args = ("--model-control-mode=explicit", "--load-model=warmup_record")
    with running_daemon(repository, workdir, *args, settle=["warmup_record"]) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def _log(client: grpcclient.InferenceServerClient, model: str) -> list[list[dict]]:
    inputs = [
        infer_input("A", np.full((1, 4), 7.0, np.float32), "FP32"),
        infer_input("S", np.array([[b"x", b"y"]], dtype=np.object_), "BYTES"),
    ]
    return json.loads(client.infer(model, inputs).as_numpy("LOG")[0])


def test_each_instance_runs_the_samples_before_its_first_request(
    client: grpcclient.InferenceServerClient,
) -> None:
    stats = client.get_inference_statistics("warmup_record", as_json=True)["model_stats"][0]
    # 2 instances x (3 requests x 2 + 1 + 2): counted as Triton counts its warmup requests.
    assert (int(stats["inference_count"]), int(stats["execution_count"])) == (18, 8)
    log = _log(client, "warmup_record")
    assert [len(execute) for execute in log] == [3, 3, 1, 2, 1]  # then the client's own
    assert log[0] == log[1] == [ZEROS] * 3
    random, files = log[2][0], log[3]
    assert random["A"][:2] == ["float32", [1, 4]] and random["S"] == ZEROS["S"]
    assert files == [FROM_FILES] * 2
    assert log[4] == [{"A": ["float32", [1, 4], [7.0] * 4], "S": ["object", [1, 2], ["x", "y"]]}]


def test_a_decoupled_model_is_warmed_up_to_its_final_responses(
    client: grpcclient.InferenceServerClient,
) -> None:
    client.load_model("warmup_decoupled")
    stats = client.get_inference_statistics("warmup_decoupled", as_json=True)["model_stats"][0]
    assert int(stats["execution_count"]) == 1 and int(stats["inference_count"]) == 2


def test_a_restarted_instance_warms_up_again(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    def executions() -> int:
        stats = client.get_inference_statistics("warmup_record", as_json=True)["model_stats"]
        return int(stats[0]["execution_count"])

    before = executions()
    pid = next(iter(daemon.workers_of("warmup_record")))
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: executions() == before + 4, 60, "the replacement's warmup")
    assert pid not in daemon.workers_of("warmup_record")


def test_a_restarted_instance_is_not_ready_until_its_warmup_ends(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    model_dir = daemon.repository / "warmup_hold"
    client.load_model("warmup_hold")
    assert client.is_model_ready("warmup_hold")
    http = httpclient.InferenceServerClient(daemon.http_url)
    hold = model_dir / "hold"
    hold.touch()  # the replacement's warmup waits until the file goes
    try:
        (pid,) = daemon.workers_of("warmup_hold")
        os.kill(pid, signal.SIGKILL)

        def replacement() -> int:
            started = [p for p in model_dir.glob("warmup-started.*") if p.suffix != f".{pid}"]
            return int(started[0].suffix[1:]) if started else 0

        new_pid = wait_until(replacement, 60, "the replacement's warmup to start")
        for _ in range(20):  # the warmup is held: none of these may see the model ready
            assert not (model_dir / f"warmup-ended.{new_pid}").exists()
            assert client.is_model_ready("warmup_hold") is False
            assert http.is_model_ready("warmup_hold") is False
            error = error_of(lambda: client.infer("warmup_hold", [_x(1.0)], client_timeout=0.2))
            assert error.status() in {"StatusCode.DEADLINE_EXCEEDED", "StatusCode.UNAVAILABLE"}
    finally:
        hold.unlink()
    wait_until(lambda: client.is_model_ready("warmup_hold"), 60, "the model to be ready again")
    assert (model_dir / f"warmup-ended.{new_pid}").exists()
    assert client.infer("warmup_hold", [_x(2.0)]).as_numpy("Y").tolist() == [2.0]


def _x(value: float) -> grpcclient.InferInput:
    return infer_input("X", np.array([value], np.float32), "FP32")


def _expected(daemon: Daemon, model: str) -> str:
    """What Triton 2.51 answered for the same config (paths and line numbers are ours)."""
    directory = daemon.repository
    reason = {
        "warmup_raise": "failed to run warmup sample 's1': "
        + 2
        * f"Failed to process the request(s) for model 'warmup_raise_0', message: "
        "TritonModelException: warmup exploded\n\nAt:\n  "
        f"{directory}/warmup_raise/1/model.py(LINE): execute\n; ",
        "warmup_error": "failed to run warmup sample 's1': no; no; ",
        "warmup_big_batch": "failed to run warmup sample 's1': "
        + 9 * "batch size 9 for 'warmup_big_batch_0', max allowed is 8; ",
        "warmup_short_file": "[request id: <id_unknown>] warmup setting expects 16 bytes, but "
        f"the data provided from s.binonly has {len(FILE_S)} bytes",
        "warmup_variable": "warmup setting expects all variable-size dimensions are specified "
        "for input 'A'",
        "warmup_wrong_type": "[request id: <id_unknown>] inference input 'A' data-type is "
        "'INT32', but model 'warmup_wrong_type' expects 'FP32'",
        "warmup_missing_input": "[request id: <id_unknown>] expected 2 inputs but got 1 inputs "
        "for model 'warmup_missing_input'. Got input(s) ['A'], but missing required input(s) "
        "['S']. Please provide all required input(s).",
    }.get(model)
    if reason is None:  # the one Triton reports as Internal
        path = directory / "warmup_no_file" / "warmup" / "missing.bin"
        status = f"Internal: failed to open text file for read {path}: No such file or directory"
    else:
        status = f"Invalid argument: {reason}"
    return f"load failed for model '{model}': version 1 is at UNAVAILABLE state: {status};\n"


@pytest.mark.parametrize(
    "model",
    [
        "warmup_raise",
        "warmup_error",
        "warmup_big_batch",
        "warmup_no_file",
        "warmup_short_file",
        "warmup_variable",
        "warmup_wrong_type",
        "warmup_missing_input",
    ],
)
def test_a_failing_sample_fails_the_load_as_in_triton(
    client: grpcclient.InferenceServerClient, daemon: Daemon, model: str
) -> None:
    error = error_of(lambda: client.load_model(model))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    expected = re.escape(_expected(daemon, model)).replace("LINE", r"\d+")
    assert re.fullmatch(expected, error.message()), error.message()
    assert client.is_model_ready(model) is False
    wait_until(lambda: not daemon.workers_of(model), 30, f"the workers of {model} to exit")
