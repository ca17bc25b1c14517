"""Client-side cancellation reaches the model: a cancelled ModelInfer future or a closed
stream makes ``request.is_cancelled()`` / ``sender.is_cancelled()`` true in the worker, and
requests of a cancelled call that have not started never run."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import (
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    make_repository,
    running_daemon,
    wait_until,
)
from streaming_helpers import (
    STREAM_MODELS,
    STREAM_TIMEOUT_S,
    mode_input,
    open_stream,
    probe_inputs,
    repeat_inputs,
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("cancellation")
    repository = make_repository(workdir, {m: TEST_MODELS / m for m in STREAM_MODELS})
    with running_daemon(repository, workdir, settle=list(STREAM_MODELS)) as running:
        yield running


def executed(where: Path) -> list[int]:
    path = where / "executed"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def appears(path: Path, what: str) -> None:
    wait_until(path.exists, SETTLE_TIMEOUT_S, what)


def start(client: grpcclient.InferenceServerClient, ident: int, where: Path) -> Any:
    answers: queue.Queue[Any] = queue.Queue()
    context = client.async_infer(
        "cancel_probe", probe_inputs(ident, where), lambda result, error: answers.put(error)
    )
    return context, answers


def test_cancelling_a_model_infer_future_reaches_execute(daemon: Daemon, tmp_path: Path) -> None:
    client = daemon.client()
    context, answers = start(client, 1, tmp_path)
    appears(tmp_path / "executing-1", "the request to run")
    context.cancel()
    error = answers.get(timeout=STREAM_TIMEOUT_S)
    assert error is not None and "CANCELLED" in str(error)
    appears(tmp_path / "cancelled-1", "the model to see the cancellation")
    # The instance goes on serving.
    (tmp_path / "release-2").touch()
    result = client.infer("cancel_probe", probe_inputs(2, tmp_path))
    assert int(result.as_numpy("ID")[0]) == 2
    assert not (tmp_path / "cancelled-2").exists()


def test_cancelled_requests_that_did_not_start_never_run(daemon: Daemon, tmp_path: Path) -> None:
    """With one instance busy, request 2 waits in the worker's pipeline and 3 in the daemon's
    queue; both are cancelled, and neither runs once the instance is free again."""
    client = daemon.client()
    _first, first_answer = start(client, 1, tmp_path)
    appears(tmp_path / "executing-1", "the first request to run")
    second, second_answer = start(client, 2, tmp_path)
    third, third_answer = start(client, 3, tmp_path)
    second.cancel()
    third.cancel()
    for answer in (second_answer, third_answer):
        assert "CANCELLED" in str(answer.get(timeout=STREAM_TIMEOUT_S))
    # A round trip on the same connection: the server has processed both cancellations.
    assert client.infer("default_sender", mode_input("return")) is not None
    (tmp_path / "release-1").touch()
    assert first_answer.get(timeout=STREAM_TIMEOUT_S) is None
    (tmp_path / "release-4").touch()
    client.infer("cancel_probe", probe_inputs(4, tmp_path))
    assert executed(tmp_path) == [1, 4]


def test_closing_a_stream_cancels_a_decoupled_request(daemon: Daemon, tmp_path: Path) -> None:
    client = grpcclient.InferenceServerClient(daemon.url)
    got: queue.Queue[Any] = queue.Queue()
    try:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("cancel_probe_decoupled", probe_inputs(7, tmp_path))
        for _ in range(2):
            result, error = got.get(timeout=STREAM_TIMEOUT_S)
            assert error is None and int(result.as_numpy("ID")[0]) == 7
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    appears(tmp_path / "cancelled-7", "the model's sender to see the cancellation")
    with open_stream(daemon) as (stream, answers):
        stream.async_stream_infer("repeat_decoupled", repeat_inputs([5]))
        ((result, error),) = answers.take(1)
    assert error is None and int(result.as_numpy("OUT")[0]) == 5


def test_closing_a_stream_cancels_running_and_queued_requests(
    daemon: Daemon, tmp_path: Path
) -> None:
    client = grpcclient.InferenceServerClient(daemon.url)
    try:
        client.start_stream(callback=lambda result, error: None)
        for ident in (8, 9, 10):
            client.async_stream_infer("cancel_probe", probe_inputs(ident, tmp_path))
        appears(tmp_path / "executing-8", "the first streamed request to run")
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    appears(tmp_path / "cancelled-8", "the running request to see the cancellation")
    (tmp_path / "release-11").touch()
    daemon.client().infer("cancel_probe", probe_inputs(11, tmp_path))
    assert executed(tmp_path) == [8, 11]


def test_a_cancelled_future_status_code(daemon: Daemon, tmp_path: Path) -> None:
    """What tritonclient reports for a call it cancelled itself."""
    client = daemon.client()
    context, answers = start(client, 12, tmp_path)
    appears(tmp_path / "executing-12", "the request to run")
    context.cancel()
    error = answers.get(timeout=STREAM_TIMEOUT_S)
    assert error.status() == str(grpc.StatusCode.CANCELLED)
    appears(tmp_path / "cancelled-12", "the model to see the cancellation")
