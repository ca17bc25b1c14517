"""The benchmark's own parts: statistics, answer checks, and the echo server end to end.

No wall-clock thresholds: these check counts and values, never speed.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from bench import procstat
from bench.loadgen import (
    LoadStats,
    ResponseMismatch,
    build_request,
    check_response,
    percentile,
    run_load,
    summarize,
)
from bench.report import Scenario, ScenarioResult, format_row
from bench.servers import ServerProcess, start_echo


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_summarize_counts_and_converts_to_milliseconds() -> None:
    latencies = [0.004, 0.001, 0.003, 0.002]  # unsorted on purpose
    stats = summarize(latencies, window_s=2.0, errors=1, mismatches=0)
    assert stats.requests == 4
    assert stats.errors == 1
    assert stats.infer_per_s == 2.0
    assert stats.p50_ms == pytest.approx(2.0)
    assert stats.p99_ms == pytest.approx(4.0)
    assert stats.mean_ms == pytest.approx(2.5)
    assert not stats.valid  # an error invalidates the run


def test_summarize_of_nothing() -> None:
    stats = summarize([], window_s=0.0)
    assert stats.requests == 0 and stats.infer_per_s == 0.0
    assert math.isnan(stats.p50_ms) and math.isnan(stats.mean_ms)
    assert not stats.valid


def _response(name: str, shape: list[int], raw: bytes) -> bytes:
    response = service_pb2.ModelInferResponse()
    response.outputs.add(name=name, datatype="FP32", shape=shape)
    response.raw_output_contents.append(raw)
    return response.SerializeToString()


def test_check_response_accepts_only_the_echo() -> None:
    payload, data = build_request("m", [1, 4])
    request = service_pb2.ModelInferRequest.FromString(payload)
    assert request.raw_input_contents[0] == data and len(data) == 16
    check_response(_response("OUTPUT0", [1, 4], data), [1, 4], data)
    with pytest.raises(ResponseMismatch):
        check_response(_response("OUTPUT0", [1, 4], bytes(16)), [1, 4], data)
    with pytest.raises(ResponseMismatch):
        check_response(_response("OUTPUT0", [4], data), [1, 4], data)
    with pytest.raises(ResponseMismatch):
        check_response(_response("OUTPUT1", [1, 4], data), [1, 4], data)


@pytest.fixture(scope="module", params=["grpcio", "pbd"])
def echo(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The echo server on each gRPC server: grpc.aio's and pbd's own HTTP/2."""
    folder = Path(tmp_path_factory.mktemp(f"echo-{request.param}"))
    server = start_echo(sys.executable, folder, front_end=request.param)
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


def test_echo_server_answers_tritonclient(echo: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(echo.target) as client:
        for rows in (1, 3):
            values = np.arange(rows * 5, dtype=np.float32).reshape(rows, 5) - 2.5
            flags = np.arange(rows * 5, dtype=np.int8).reshape(rows, 5)
            tensor = grpcclient.InferInput("INPUT0", list(values.shape), "FP32")
            tensor.set_data_from_numpy(values)
            other = grpcclient.InferInput("INPUT1", list(flags.shape), "INT8")
            other.set_data_from_numpy(flags)
            result = client.infer("anything", [tensor, other], request_id=f"r{rows}")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), flags)
            assert result.get_response().id == f"r{rows}"


def test_loadgen_against_echo_counts_and_respects_the_cap(echo: ServerProcess) -> None:
    payload, data = build_request("m", [1, 16])
    stats = asyncio.run(
        run_load(
            echo.target,
            payload,
            [1, 16],
            data,
            concurrency=2,
            duration=30.0,
            warmup=0.0,
            max_requests=20,
            check_every=1,
        )
    )
    assert stats.capped  # 20 requests end the run long before 30 s
    assert 0 < stats.requests <= 20
    assert stats.errors == 0 and stats.mismatches == 0
    assert stats.valid
    assert set(stats.cpu_s) == {"client"}


def test_scenario_result_takes_medians_and_ratios() -> None:
    result = ScenarioResult(Scenario("s", [1, 16], 1))

    def run(rate: float, cpu_s: float) -> LoadStats:
        requests = int(rate)
        stats = summarize([0.001] * requests, window_s=1.0)
        return replace(stats, cpu_s={"server": cpu_s, "client": 0.0})

    result.runs["echo"] += [run(100, 0.05), run(300, 0.15)]  # medians 200/s, 500 µs each
    result.runs["pbd"] += [run(50, 0.05), run(150, 0.15)]  # 100/s, 1000 µs each
    assert result.median("echo", "infer_per_s") == 200
    assert result.ratio == pytest.approx(0.5)
    assert result.cpu_us_per_infer("echo") == pytest.approx(500)
    assert result.cpu_ratio == pytest.approx(2.0)
    assert result.valid
    assert "0.50" in format_row(result)


def test_cpu_split_reads_this_process_threads() -> None:
    import threading

    from bench.cpu_split import threads

    seen = threads(os.getpid())
    assert threading.get_native_id() in seen
    assert all(sample.cpu_s >= 0 and sample.switches >= 0 for sample in seen.values())


def test_tracing_off_prints_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import tracing_off

    assert tracing_off.main(["--daemon-us", "400"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("tracing off, per request") and "% of 400 us" in lines[-1]


def test_cold_path_runs_the_worker_path_and_reports_each_gap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import cold_path

    assert cold_path.main(["--requests", "20", "--gaps-ms", "0.1,0.2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    labels = [line[:22].strip() for line in lines[1:]]
    assert labels == ["back to back", "after 0.1 ms idle", "after 0.2 ms idle"]
    for line in lines[1:]:
        cost, cost_ratio, reference, reference_ratio = line[22:].split()
        assert float(cost) > 0 and float(reference) > 0
        assert cost_ratio.endswith("x") and reference_ratio.endswith("x")
    assert lines[1][22:].split()[1::2] == ["1.0x", "1.0x"]
    assert not [name for name in os.listdir("/dev/shm") if name.startswith("pbd-coldpath-")]


def test_cold_path_refuses_gaps_that_are_not_positive() -> None:
    from bench.cold_path import parse_gaps

    assert parse_gaps("0.5, 2") == [0.5, 2.0]
    with pytest.raises(Exception, match="positive"):
        parse_gaps("0,1")


def test_trees_runs_a_commit_beside_this_tree(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both daemons answer right, each imports its own tree, and the worktree is gone after."""
    from bench import trees

    original, made = trees.worktree, []

    def worktree(rev: str, where: Path) -> Path:
        made.append(original(rev, where))
        return made[-1]

    monkeypatch.setattr(trees, "worktree", worktree)
    assert trees.main(["--base", "HEAD", "--rounds", "2", "--seconds", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[2:4]] == ["base", "head"]
    ratios = [line.split()[1] for line in out[4:]]
    assert ratios == ["infer/s", "p50", "p99", "CPU"]
    for line in out[4:]:
        assert len(line.split("rounds")[1].split()) == 2  # one ratio per round
    listed = subprocess.run(
        ["git", "worktree", "list"], cwd=trees.ROOT, capture_output=True, text=True, check=True
    )
    # Its own worktree: other checkouts of this repository may run the bench meanwhile.
    (path,) = made
    assert str(path) not in listed.stdout


def test_trees_puts_the_base_tree_first_and_refuses_an_unknown_rev(tmp_path: Path) -> None:
    from bench import trees

    assert trees.python_path(os.getpid()) == os.environ.get("PYTHONPATH")
    path = trees.tree_path(tmp_path).split(os.pathsep)
    assert path == [str(tmp_path / "service"), str(tmp_path / "workers"), str(tmp_path / "protos")]
    with pytest.raises(ValueError, match="no-such-rev"):
        trees.worktree("no-such-rev", tmp_path)


def test_established_counts_the_connections_a_process_accepted_on_a_port() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert procstat.established(os.getpid(), port) == 0
        with socket.create_connection(("127.0.0.1", port)):
            served, _ = listener.accept()
            with served:
                # The accepted end (local port = port) counts; the client's end does not.
                assert procstat.established(os.getpid(), port) == 1


def test_the_cores_http_body_is_an_infer_request_pbd_parses(tmp_path: Path) -> None:
    from bench.cores import MODEL, http_body
    from pbd.http.tensors import parse_infer_request

    path, header = http_body(tmp_path / "body")
    parsed = parse_infer_request(path.read_bytes(), str(header), MODEL, "")
    (tensor,) = parsed.request.inputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("INPUT0", "FP32", [1, 16])
    assert bytes(tensor.data) == bytes(range(64))
    assert parsed.binary_outputs == {"OUTPUT0"}


def test_the_cores_runs_try_the_direct_path_only_with_front_ends() -> None:
    from bench.cores import pbd_runs

    assert pbd_runs([1, 2], "on") == [(1, True), (2, True)]
    assert pbd_runs([1, 4], "off") == [(1, False), (4, False)]
    assert pbd_runs([1, 2], "both") == [(1, True), (2, True), (2, False)]


def test_the_cores_busiest_thread_names_its_process() -> None:
    from bench.cores import role

    assert role(os.getpid(), os.getpid()) == "main"
    sleeper = "import time; time.sleep(30)"
    started = {
        name: subprocess.Popen([sys.executable, "-c", sleeper, *argv])
        for name, argv in {
            "front": ["-m", "pbd.fronts.front"],
            "worker": ["pbd_worker"],
            "child": ["other"],
        }.items()
    }
    try:
        for name, process in started.items():
            # Until the child has exec'd: before that its command line is pytest's own.
            deadline = time.monotonic() + 30
            while sleeper.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline, "the child never ran its command"
                time.sleep(0.01)
            assert role(process.pid, os.getpid()) == name
    finally:
        for process in started.values():
            process.kill()
            process.wait()


def test_instructions_reads_a_callgrind_total(tmp_path: Path) -> None:
    from bench.instructions import totals

    dump = tmp_path / "callgrind.1.1"
    dump.write_text("# callgrind format\nversion: 1\nevents: Ir\nfn=main\n1 5\nsummary: 1234567\n")
    assert totals(dump) == 1234567
    (tmp_path / "empty").write_text("events: Ir\n")
    with pytest.raises(ValueError, match="no summary"):
        totals(tmp_path / "empty")


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("valgrind", "callgrind_control", "h2load")),
    reason="needs valgrind and h2load (Debian's valgrind, nghttp2-client)",
)
def test_instructions_counts_the_daemon_over_exactly_the_calls_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import instructions

    assert instructions.main(["--requests", "40", "--warmup", "10"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    (main_row,) = [r for r in rows if r[:2] == ["head", "main"]]
    # A gRPC call through pbd's daemon takes hundreds of thousands of instructions; the
    # daemon's idle loop alone would give far fewer per call.
    assert int(main_row[3].replace(",", "")) > 50_000


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("valgrind", "callgrind_control", "h2load")),
    reason="needs valgrind and h2load (Debian's valgrind, nghttp2-client)",
)
def test_instructions_counts_http_infer_calls_too(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import instructions

    assert instructions.main(["--http", "--connections", "2", "--requests", "40"]) == 0
    out = capsys.readouterr().out
    assert "HTTP/1.1, 1 in flight" in out
    rows = [line.split() for line in out.splitlines()]
    (main_row,) = [r for r in rows if r[:2] == ["head", "main"]]
    assert int(main_row[3].replace(",", "")) > 50_000
