"""Iterative sequences through the real daemon and tritonclient: a model releases its request
with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE and sees it again (same inputs, request id and
correlation ID; flags START, then 0) until it answers, non-decoupled, decoupled and through
BLS; a request without a sequence ID gets one; Triton's errors for misuse. Expected values are
what Triton 2.51 answered for the same models and requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import (
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
)
from streaming_helpers import final_flag, open_stream, text

MODELS = ("iterative_count", "iterative_decoupled", "reschedule_misuse", "bls_iterative")
START = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("rescheduling")
    repository = make_repository(workdir, {name: TEST_MODELS / name for name in MODELS})
    with running_daemon(repository, workdir, settle=list(MODELS)) as daemon:
        yield daemon


def count(client: grpcclient.InferenceServerClient, n: int, **kw: Any) -> list[list[Any]]:
    """What each run of one request to iterative_count saw: [request id, corr ID, flags, batch]."""
    tensor = infer_input("N", np.array([[n]], dtype=np.int32), "INT32")
    result = client.infer("iterative_count", [tensor], client_timeout=SETTLE_TIMEOUT_S, **kw)
    runs: list[list[Any]] = json.loads(result.as_numpy("LOG")[0][0])
    return runs


def test_a_rescheduled_request_runs_again_until_the_model_answers(daemon: Daemon) -> None:
    client = daemon.client()
    runs = count(client, 3, request_id="r1")
    # No sequence ID: the request gets one of its own, and START on its first run only.
    key = runs[0][1]
    assert isinstance(key, int) and key > 0
    assert [run[:3] for run in runs] == [["r1", key, START], ["r1", key, 0], ["r1", key, 0]]
    other = count(client, 1, request_id="r2")
    assert [run[:3] for run in other] == [["r2", other[0][1], START]]
    assert other[0][1] != key


def test_a_sequence_id_is_kept_and_the_sequence_ends_with_its_request(daemon: Daemon) -> None:
    client = daemon.client()
    for key in (42, "text-id"):
        runs = count(client, 2, request_id="s", sequence_id=key, sequence_start=True)
        assert [run[:3] for run in runs] == [["s", key, START], ["s", key, 0]]
    later = error_of(lambda: count(client, 1, request_id="t", sequence_id=42))
    assert later.status() == "StatusCode.INVALID_ARGUMENT"
    assert "inference request for sequence 42 to model 'iterative_count' must specify the " \
        "START flag on the first request of the sequence" in later.message()  # fmt: skip


def test_requests_in_flight_at_once_each_finish(daemon: Daemon) -> None:
    client = daemon.client()
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda i: count(client, 3, request_id=f"c{i}"), range(4)))
    keys = set()
    for i, runs in enumerate(outcomes):
        assert [(run[0], run[2]) for run in runs] == [(f"c{i}", START), (f"c{i}", 0), (f"c{i}", 0)]
        assert len({run[1] for run in runs}) == 1
        keys.add(runs[0][1])
    assert len(keys) == 4


def test_http_requests_are_rescheduled_too(daemon: Daemon) -> None:
    client = httpclient.InferenceServerClient(daemon.http_url)
    try:
        tensor = httpclient.InferInput("N", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[2]], dtype=np.int32))
        result = client.infer("iterative_count", [tensor], request_id="h")
    finally:
        client.close()
    runs = json.loads(result.as_numpy("LOG")[0][0])
    assert [(run[0], run[2]) for run in runs] == [("h", START), ("h", 0)]


def test_a_decoupled_model_streams_a_response_per_run(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        tensor = infer_input("N", np.array([3], dtype=np.int32), "INT32")
        client.async_stream_infer("iterative_decoupled", [tensor], request_id="d")
        got = answers.take(3)
    assert all(error is None for _, error in got)
    seen = [json.loads(text(result, "LOG")) for result, _ in got]
    key = seen[0][1]
    assert seen == [["d", key, START], ["d", key, 0], ["d", key, 0]]
    assert [final_flag(result) for result, _ in got] == [False, False, True]
    assert answers.left() == []


@pytest.mark.parametrize("mode", ["exec", "async_exec", "decoupled"])
def test_a_bls_call_waits_while_its_callee_reschedules(daemon: Daemon, mode: str) -> None:
    client = daemon.client()
    tensor = infer_input("N", np.array([3], dtype=np.int32), "INT32")
    result = client.infer("bls_iterative", [tensor], parameters={"mode": mode})
    logs = [json.loads(log) for log in result.as_numpy("LOG")]
    if mode == "decoupled":  # a response per run
        assert [(seen[0], seen[2]) for seen in logs] == [("", START), ("", 0), ("", 0)]
    else:
        (runs,) = logs
        assert [(run[0], run[2]) for run in runs] == [("", START), ("", 0), ("", 0)]
        assert len({run[1] for run in runs}) == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the "
             "model is not configured to handle such a flag."),
        ({"respond": True}, "Failed to process the request(s) for model 'reschedule_misuse_0_0', "
             "message: Expected a None object in the execute function return list for "
             "reschduled request, found type "
             "'<class 'pbd_worker.model_api.response.InferenceResponse'>'."),
    ],
    ids=["not-an-iterative-sequence", "a-response-returned"],
)  # fmt: skip
def test_tritons_errors_for_a_reschedule_it_cannot_do(
    daemon: Daemon, params: dict[str, Any], message: str
) -> None:
    client = daemon.client()
    tensor = infer_input("N", np.array([1], dtype=np.int32), "INT32")
    error = error_of(
        lambda: client.infer(
            "reschedule_misuse", [tensor], parameters=params, client_timeout=SETTLE_TIMEOUT_S
        )
    )
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message() == message
