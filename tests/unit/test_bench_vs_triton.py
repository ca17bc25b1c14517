"""bench.vs_triton's own logic, without Triton: case selection, ratios and tables, the
shared-memory request and its answer check.

No server is started and nothing is downloaded; no wall-clock thresholds.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from bench.loadgen import (
    LoadStats,
    ResponseMismatch,
    build_request,
    build_shm_request,
    check_shm_response,
    summarize,
)
from bench.report import Scenario, ScenarioResult, format_row, table_head
from bench.vs_triton import CASES, SERVERS, ShmPair, markdown_table, select_cases


def test_cases_are_the_issues_and_filter_by_substring() -> None:
    assert [c.label for c in CASES] == [
        "fp32 [1,16] c=1",
        "fp32 [1,16] c=8",
        "fp32 1 MiB c=1",
        "fp32 1 MiB c=4",
        "fp32 16 MiB c=2",
        "fp32 1 MiB shm c=4",
        "fp32 [1,16] batch c=16",
        "fp32 [1,16] http c=1",
        "fp32 [1,16] http c=8",
        "fp32 1 MiB http json c=1",
        "fp32 1 MiB http binary c=1",
    ]
    assert [c.scenario.shape for c in CASES][2:5] == [[1, 262144]] * 2 + [[1, 4194304]]
    assert [c.shm for c in CASES] == [False] * 5 + [True] + [False] * 5
    # Over HTTP/REST with tritonclient.http: binary tensors, and 1 MiB as JSON too.
    assert [c.http for c in CASES][7:] == ["binary", "binary", "json", "binary"]
    assert [c.label for c in select_cases(CASES, ["http"])] == [c.label for c in CASES[7:]]
    # The batching case runs the identity with dynamic_batching {} (bench/models).
    assert {c.model for c in CASES} == {"identity_fp32_x2", "identity_fp32_batch"}
    assert [c.label for c in select_cases(CASES, ["batch"])] == ["fp32 [1,16] batch c=16"]
    assert select_cases(CASES, []) == CASES
    assert [c.label for c in select_cases(CASES, ["shm"])] == ["fp32 1 MiB shm c=4"]
    assert len(select_cases(CASES, ["c=8", "16 MiB"])) == 3
    assert select_cases(CASES, ["nothing"]) == []


def _run(rate: int, cpu_s: float) -> LoadStats:
    stats = summarize([0.002] * rate, window_s=1.0)
    return replace(stats, cpu_s={"server": cpu_s, "client": 0.0})


@pytest.fixture
def result() -> ScenarioResult:
    res = ScenarioResult(Scenario("fp32 [1,16]", [1, 16], 8), servers=SERVERS)
    res.runs["triton"] += [_run(1000, 0.3), _run(3000, 0.9), _run(2000, 0.6)]  # 2000/s, 300 µs
    res.runs["pbd"] += [_run(500, 0.3), _run(1500, 0.9), _run(1000, 0.6)]  # 1000/s, 600 µs
    return res


def test_ratios_are_pbd_over_triton(result: ScenarioResult) -> None:
    assert set(result.runs) == {"triton", "pbd"}
    assert result.ratio == pytest.approx(0.5)
    assert result.cpu_us_per_infer("triton") == pytest.approx(300)
    assert result.cpu_ratio == pytest.approx(2.0)
    summary = result.summary()
    assert summary["ratio_pbd_over_triton"] == pytest.approx(0.5)
    assert summary["cpu_ratio_pbd_over_triton"] == pytest.approx(2.0)
    assert summary["triton"]["infer_per_s"] == 2000  # type: ignore[index]


def test_row_lines_up_with_head(result: ScenarioResult) -> None:
    head, row = table_head(SERVERS), format_row(result)
    assert "triton/s" in head and "pbd/triton" in head
    for column in ("triton/s", "pbd/s", "pbd/triton", "cpu x"):
        end = head.index(column) + len(column)
        assert row[end - 1] != " " and row[end] == " ", column  # right-aligned under it
    assert row.split("|")[1].split() == ["2000", "2.00", "2.00", "300"]
    assert row.split("|")[3].split()[:2] == ["0.50", "2.00"]


def test_markdown_table(result: ScenarioResult) -> None:
    empty = ScenarioResult(Scenario("fp32 16 MiB", [1, 4], 2), servers=SERVERS)
    lines = markdown_table([result, empty]).splitlines()
    assert len(lines) == 4
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == 14
    assert lines[2] == (
        "| fp32 [1,16] | 8 | 2000 | 2.00 | 2.00 | 300 | 1000 | 2.00 | 2.00 | 600 | 0.50 | 0.50 "
        "| 2.00 |"
    )
    assert lines[3].endswith("| - | - | - |")  # no runs: no numbers, no crash


def test_paired_ratio_sets_each_run_against_the_one_beside_it() -> None:
    """Ratios per repeat (0.9, 0.95, 0.909), then their median."""
    res = ScenarioResult(Scenario("fp32 [1,16]", [1, 16], 1), servers=SERVERS)
    res.runs["triton"] += [_run(1000, 0.3), _run(400, 0.3), _run(1100, 0.3)]
    res.runs["pbd"] += [_run(900, 0.3), _run(380, 0.3), _run(1000, 0.3)]
    assert res.ratio == pytest.approx(900 / 1000)
    assert res.paired_ratio == pytest.approx(1000 / 1100)
    assert res.summary()["paired_ratio_pbd_over_triton"] == pytest.approx(1000 / 1100)
    assert math.isnan(ScenarioResult(Scenario("x", [1], 1), servers=SERVERS).paired_ratio)


def _shm_answer(shape: list[int], raw: bytes = b"") -> bytes:
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="OUTPUT0", datatype="FP32", shape=shape)
    if raw:
        response.raw_output_contents.append(raw)
    return response.SerializeToString()


def test_shm_request_names_the_regions_and_carries_no_bytes() -> None:
    raw = build_shm_request("m", [1, 8], "in_r", "out_r")
    request = service_pb2.ModelInferRequest.FromString(raw)
    assert not request.raw_input_contents
    (tensor,) = request.inputs
    (output,) = request.outputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("INPUT0", "FP32", [1, 8])
    assert tensor.parameters["shared_memory_region"].string_param == "in_r"
    assert tensor.parameters["shared_memory_byte_size"].int64_param == 32
    assert output.name == "OUTPUT0"
    assert output.parameters["shared_memory_region"].string_param == "out_r"
    assert output.parameters["shared_memory_byte_size"].int64_param == 32
    check_shm_response(_shm_answer([1, 8]), [1, 8])
    with pytest.raises(ResponseMismatch):
        check_shm_response(_shm_answer([1, 8], bytes(32)), [1, 8])
    with pytest.raises(ResponseMismatch):
        check_shm_response(_shm_answer([8]), [1, 8])


def test_shm_pair_checks_the_output_region_and_clears_it() -> None:
    shape = [1, 64]
    _, data = build_request("m", shape)
    pair = ShmPair(f"pbdvt_test{os.getpid()}", shape, data, targets=[])
    paths = [f"/dev/shm/{pair.input_name}", f"/dev/shm/{pair.output_name}"]
    try:
        assert all(os.path.exists(p) for p in paths)
        with open(paths[0], "rb") as f:
            assert f.read() == data  # the input region holds the tensor
        answer = _shm_answer(shape)
        with pytest.raises(ResponseMismatch):
            pair.check(answer)  # the output region starts zeroed: nothing was written
        with open(paths[1], "r+b") as f:  # what a server does: the input into the output
            f.write(data)
        pair.check(answer)
        with open(paths[1], "rb") as f:
            assert f.read() == bytes(len(data))  # cleared for the next check
        with pytest.raises(ResponseMismatch):
            pair.check(answer)
        request = service_pb2.ModelInferRequest.FromString(pair.request("m"))
        assert request.inputs[0].parameters["shared_memory_region"].string_param == (
            pair.input_name
        )
        assert np.array_equal(pair.expected, np.frombuffer(data, np.float32).reshape(shape))
    finally:
        pair.close()
    assert not any(os.path.exists(p) for p in paths)


def test_interpreter_facts_name_this_build_and_flag_another() -> None:
    import subprocess
    import sys

    from bench import procstat
    from bench.interpreters import interpreter_note, interpreter_version

    here = interpreter_version(sys.executable)
    assert here == " ".join(sys.version.split())
    assert interpreter_version("/nonexistent/python3") == ""
    runtime = procstat.python_runtime(os.getpid())
    assert "libpython3" in runtime or os.path.samefile(runtime, sys.executable)
    with subprocess.Popen(["sleep", "5"]) as child:
        try:
            assert procstat.python_runtime(child.pid).endswith("sleep")  # no libpython
        finally:
            child.kill()
    assert procstat.python_runtime(2**22 + 1) == ""  # above pid_max: no such process

    same = {
        "pbd_python": "/a b/python",  # a path may hold spaces
        "pbd_python_build": here,
        "triton_stub_python": "/usr/bin/python3",
        "triton_stub_python_build": here,
    }
    assert interpreter_note(same) == ""
    other = {**same, "triton_stub_python_build": "3.11.2 (main) [GCC 12.2.0]"}
    note = interpreter_note(other)
    assert note.startswith(f"note: pbd runs on /a b/python ({here}), Triton's stub on ")
    assert "--python .venv-system/bin/python" in note
