"""Decoupled models and the response sender, end to end with tritonclient's streaming API.

The repeat model sends one response per input value from a thread after execute() returned;
the misuse models try what Triton refuses and report the sender's answer; the daemon keeps
serving after each mistake.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pbd_harness import (
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)
from streaming_helpers import (
    STREAM_MODELS,
    final_flag,
    mode_input,
    open_stream,
    repeat_inputs,
    text,
)
from traffic import gated_inputs

UNLOAD_HEADSTART_S = 0.5
FINAL_TEXT = "TritonModelException: Unable to send response. "


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("decoupled")
    repository = make_repository(workdir, {m: TEST_MODELS / m for m in STREAM_MODELS})
    with running_daemon(repository, workdir, settle=list(STREAM_MODELS)) as running:
        yield running


def repeat_values(answers: list[tuple[Any, Any]]) -> list[tuple[int, int, bool]]:
    out = []
    for result, error in answers:
        assert error is None, str(error)
        out.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0]),
                    final_flag(result)))  # fmt: skip
    return out


def test_repeat_sends_each_value_from_a_thread(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs([4, 2, 7], 5), request_id="r")
        got = answers.take(3)
        assert repeat_values(got) == [(4, 0, False), (2, 1, False), (7, 2, False)]
        assert {result.get_response().id for result, _ in got} == {"r"}
    # The final flag came alone, and without enable_empty_final_response it is not sent.
    assert answers.left() == []


def test_empty_final_response_when_asked(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer(
            "repeat_decoupled", repeat_inputs([1, 2]), request_id="e",
            enable_empty_final_response=True,
        )  # fmt: skip
        got = answers.take(3)
    assert repeat_values(got[:2]) == [(1, 0, False), (2, 1, False)]
    last, error = got[2]
    assert error is None
    response = last.get_response()
    assert final_flag(last) is True
    assert response.id == "e" and response.model_name == "repeat_decoupled"
    assert list(response.outputs) == []
    assert answers.left() == []


def test_zero_responses_then_the_final_flag(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer(
            "repeat_decoupled", repeat_inputs([]), request_id="z", enable_empty_final_response=True
        )
        ((result, error),) = answers.take(1)
    assert error is None and final_flag(result) and list(result.get_response().outputs) == []


def test_two_requests_stream_at_once(daemon: Daemon) -> None:
    """execute() returns at once, so the second request streams while the first still does."""
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs([1] * 5, 20), request_id="a")
        client.async_stream_infer("repeat_decoupled", repeat_inputs([2] * 5, 20), request_id="b")
        got = answers.take(10)
    by_id: dict[str, list[int]] = {"a": [], "b": []}
    for result, error in got:
        assert error is None, str(error)
        by_id[result.get_response().id].append(int(result.as_numpy("IDX")[0]))
    assert by_id == {"a": [0, 1, 2, 3, 4], "b": [0, 1, 2, 3, 4]}
    ids = [result.get_response().id for result, _ in got]
    assert ids != sorted(ids), "the two streams were not interleaved"


def async_inputs(ident: int, count: int, gate: Path | None = None) -> list[Any]:
    tensors = [
        infer_input("ID", np.array([ident], dtype=np.int32), "INT32"),
        infer_input("COUNT", np.array([count], dtype=np.int32), "INT32"),
    ]
    if gate is not None:
        tensors.append(infer_input("GATE", np.array([str(gate).encode()], np.object_), "BYTES"))
    return tensors


def test_async_decoupled_execute_runs_in_the_background(daemon: Daemon, tmp_path: Path) -> None:
    """The first request's execute waits on a gate; the second, sent after it to the same
    single instance, is answered meanwhile."""
    gate = tmp_path / "gate"
    gate.touch()

    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("async_decoupled", async_inputs(1, 2, gate), request_id="held")
        client.async_stream_infer("async_decoupled", async_inputs(2, 3), request_id="free")
        first = answers.take(3)
        gate.unlink()
        second = answers.take(2)
    assert [r.get_response().id for r, _ in first] == ["free"] * 3
    assert [r.get_response().id for r, _ in second] == ["held"] * 2


def test_model_infer_on_a_decoupled_model_is_unimplemented(daemon: Daemon) -> None:
    error = error_of(lambda: daemon.client().infer("repeat_decoupled", repeat_inputs([1])))
    assert error.status() == "StatusCode.UNIMPLEMENTED"
    assert error.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def misuse(daemon: Daemon, mode: str, answers_expected: int) -> list[tuple[Any, Any]]:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("decoupled_misuse", mode_input(mode), request_id=mode)
        got = answers.take(answers_expected)
        client.async_stream_infer("decoupled_misuse", mode_input("report"), request_id="report")
        got += answers.take(1)
    assert answers.left() == []
    return got


@pytest.mark.parametrize(
    ("mode", "first_answers", "refusal"),
    [
        ("send_after_final", 1, "Response sender has been closed."),
        ("bad_flag", 0, "Unsupported flag provided."),
    ],
)
def test_sender_refuses_like_triton(
    daemon: Daemon, mode: str, first_answers: int, refusal: str
) -> None:
    got = misuse(daemon, mode, first_answers)
    report, error = got[-1]
    assert error is None
    assert text(report, "ERROR") == FINAL_TEXT + refusal


def test_send_without_response_or_final_flag_is_refused(daemon: Daemon) -> None:
    got = misuse(daemon, "no_response", 0)
    assert text(got[-1][0], "ERROR") == (
        "TritonModelException: Inference Response object must be provided when the response "
        "flags is set to zero."
    )


def test_decoupled_execute_must_return_none(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("decoupled_misuse", mode_input("return_responses"))
        ((result, error),) = answers.take(1)
    assert result is None
    assert str(error) == (
        "Failed to process the request(s) for model 'decoupled_misuse_0_0', message: Python model "
        "'decoupled_misuse_0_0' is using the decoupled mode and the execute function must return "
        "None."
    )


def test_decoupled_execute_raising_answers_in_band(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("decoupled_misuse", mode_input("raise"), request_id="x")
        client.async_stream_infer("repeat_decoupled", repeat_inputs([9]), request_id="ok")
        got = answers.take(2)
    errors = [str(e) for _, e in got if e is not None]
    assert len(errors) == 1 and "the model raised on purpose" in errors[0]
    assert [int(r.as_numpy("OUT")[0]) for r, e in got if e is None] == [9]


def test_an_error_response_does_not_end_the_request(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("decoupled_misuse", mode_input("error_response"))
        (first, error), (second, second_error) = answers.take(2)
    assert first is None and str(error) == "the model sent an error response"
    assert second_error is None and text(second, "ERROR") == "after the error"
    assert final_flag(second) is True


# -- the response sender in the default mode -------------------------------------------------


def ask(daemon: Daemon, mode: str) -> str:
    return text(daemon.client().infer("default_sender", mode_input(mode)), "TEXT")


@pytest.mark.parametrize(
    ("mode", "answer"),
    [
        ("return", "returned"),
        ("one", "sent"),
        ("then_final", "sent, final apart"),
        ("thread", "from a thread"),
    ],
)
def test_default_mode_sender_answers_model_infer(daemon: Daemon, mode: str, answer: str) -> None:
    assert ask(daemon, mode) == answer


def test_default_mode_second_response_is_refused(daemon: Daemon) -> None:
    assert ask(daemon, "two") == "first"
    assert ask(daemon, "report") == (
        FINAL_TEXT + "Non-decoupled model cannot send more than one response."
    )


def test_default_mode_final_before_a_response_is_refused(daemon: Daemon) -> None:
    assert ask(daemon, "final_first") == "after the refused final"
    assert ask(daemon, "report") == (
        FINAL_TEXT + "Non-decoupled model cannot send complete final before sending a response."
    )


def test_default_mode_send_and_return_fails_the_request(daemon: Daemon) -> None:
    """A response without the final flag, then one returned: two, as Triton's front end says."""
    error = error_of(lambda: daemon.client().infer("default_sender", mode_input("send_and_return")))
    assert error.message() == "expected a single response, got 2"
    assert ask(daemon, "return") == "returned"  # and the model keeps serving


def test_default_mode_sender_on_a_stream_is_final(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("default_sender", mode_input("thread"), request_id="t")
        ((result, error),) = answers.take(1)
    assert error is None and text(result, "TEXT") == "from a thread" and final_flag(result)


def test_daemon_keeps_serving_after_the_misuse(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs([3, 3]), request_id="again")
        assert [v for v, _, _ in repeat_values(answers.take(2))] == [3, 3]
    result = daemon.client().infer("gated", gated_inputs(5))
    assert int(result.as_numpy("ID")[0]) == 5


def test_streamed_outputs_are_released(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    """Each response's output blocks go back to the worker once written to the client: with
    64 KiB segments (about 500 responses' outputs each), 3000 responses fit in two."""
    repository = make_repository(tmp_path, {"repeat_decoupled": TEST_MODELS / "repeat_decoupled"})
    small = ["--shm-default-byte-size", "65536", "--shm-growth-byte-size", "65536"]
    daemon = start_daemon(repository, *small, settle=["repeat_decoupled"])
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs(list(range(3000))))
        got = answers.take(3000)
    assert [int(r.as_numpy("OUT")[0]) for r, _ in got] == list(range(3000))
    worker_segments = [n for n in daemon.shm_segments() if n.rsplit("-", 1)[-1].startswith("w")]
    assert 1 <= len(worker_segments) <= 2, daemon.shm_segments()


def test_unload_waits_for_an_open_stream(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    """A decoupled request still streaming after execute() returned is work: unload lets it
    finish before it stops the instance."""
    repository = make_repository(tmp_path, {"async_decoupled": TEST_MODELS / "async_decoupled"})
    explicit = ("--model-control-mode", "explicit", "--load-model", "async_decoupled")
    daemon = start_daemon(repository, *explicit, settle=["async_decoupled"])
    gate = tmp_path / "gate"
    gate.touch()
    control = daemon.client()
    with ThreadPoolExecutor(1) as pool, open_stream(daemon) as (client, answers):
        client.async_stream_infer(
            "async_decoupled", async_inputs(1, 2, gate), enable_empty_final_response=True
        )
        # Unload once the request is in execute(): sent earlier, the unload finds no work.
        reached = tmp_path / "gate.reached"
        wait_until(reached.exists, 60, "the request to reach execute()")
        unloading = pool.submit(control.unload_model, "async_decoupled")
        wait_until(lambda: not control.is_model_ready("async_decoupled"), 60, "unloading")
        # Give an unload that would not wait the time to stop the instance (a slow machine can
        # only make this test pass without the wait, never fail with it).
        time.sleep(UNLOAD_HEADSTART_S)
        assert not unloading.done()
        gate.unlink()
        got = answers.take(3)
        unloading.result(timeout=60)
    assert all(error is None for _, error in got)
    assert [final_flag(result) for result, _ in got] == [False, False, True]
