"""The response sender in a default-mode (not decoupled) model, as Triton 24.06+ allows it:
exactly one response per request, with the final flag, sent before or after execute()
returns None for it; several requests of one batch each answered by their own sender. (What
already worked before, a sender answering within execute(), is in test_decoupled.py.)

Expected answers are what Triton 2.51 answered to the same model (sender_modes), run once;
where Triton hangs (a response sent without the final flag, never followed by it), pbd
answers the request with the response it got (docs/models.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from pbd_harness import (
    TEST_MODELS,
    Daemon,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
)
from streaming_helpers import final_flag, open_stream, text

MODEL = "sender_modes"
BATCHED = "sender_modes_batched"
CLIENT_TIMEOUT_S = 60.0

BATCHED_CONFIG = f"""
name: "{BATCHED}"
backend: "python"
max_batch_size: 8
input [ {{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }} ]
# Three requests form one batch (the tests send three at once).
dynamic_batching {{ preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 30000000 }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("default_sender")
    repository = make_repository(workdir, {MODEL: TEST_MODELS / MODEL})
    shutil.copytree(TEST_MODELS / MODEL / "1", repository / BATCHED / "1")
    (repository / BATCHED / "config.pbtxt").write_text(BATCHED_CONFIG)
    with running_daemon(repository, workdir, settle=[MODEL, BATCHED]) as running:
        yield running


def mode_input(mode: str, batched: bool = False) -> list[Any]:
    value = np.array([[mode.encode()]] if batched else [mode.encode()], dtype=np.object_)
    return [infer_input("MODE", value, "BYTES")]


def ask(daemon: Daemon, mode: str, model: str = MODEL) -> str:
    result = daemon.client().infer(
        model, mode_input(mode, model == BATCHED), client_timeout=CLIENT_TIMEOUT_S
    )
    return str(result.as_numpy("TEXT").reshape(-1)[0].decode())


@pytest.mark.parametrize(
    ("mode", "answer"),
    [
        ("thread", "sent from a thread"),
        ("async_task", "sent from a task"),
        ("thread_two", "first from a thread"),
    ],
)
def test_execute_returns_none_and_the_sender_answers_later(
    daemon: Daemon, mode: str, answer: str
) -> None:
    """From a thread, or from an asyncio task that runs on after execute() returned."""
    assert ask(daemon, mode) == answer


@pytest.mark.parametrize("mode", ["two", "send_unfinished_and_return"])
def test_a_response_and_then_an_error_is_two_responses(daemon: Daemon, mode: str) -> None:
    """A response without the final flag, then execute() raises or returns one too."""
    error = error_of(lambda: ask(daemon, mode))
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message() == "expected a single response, got 2"


@pytest.mark.parametrize("mode", ["two", "two_then_final"])
def test_on_a_stream_a_request_answered_twice_gets_the_first_answer(
    daemon: Daemon, mode: str
) -> None:
    """Triton's QA test_non_decoupled_two_response_pre_return: ModelInfer refuses "two"
    (above), a stream delivers the first response and drops the error after it (Triton 2.51
    on the same model: [b'first of two'] on the stream for both modes; ModelInfer answers
    "two_then_final", whose second send was refused and caught, with the first too)."""
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer(MODEL, mode_input(mode))
        ((result, error),) = answers.take(1)
        assert error is None and text(result, "TEXT") == "first of two"
        client.async_stream_infer(MODEL, mode_input("return"))  # the stream goes on
        ((after, _),) = answers.take(1)
    assert text(after, "TEXT") == "returned"
    assert answers.left() == []
    assert ask(daemon, "two_then_final") == "first of two"


def test_a_response_without_the_final_flag_is_the_answer(daemon: Daemon) -> None:
    """Triton waits for the flag until the client's deadline; one response is all a
    default-mode request can have, so pbd answers with it."""
    assert ask(daemon, "no_final") == "sent without the final flag"


def test_on_a_stream_the_one_response_is_final(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer(MODEL, mode_input("no_final"), enable_empty_final_response=True)
        ((result, error),) = answers.take(1)
    assert error is None and final_flag(result)
    assert text(result, "TEXT") == "sent without the final flag"
    assert answers.left() == []


def ask_batch(daemon: Daemon, modes: list[str]) -> list[str]:
    def one(mode: str) -> str:
        try:
            return ask(daemon, mode, BATCHED)
        except Exception as exc:  # noqa: BLE001 - the test compares the text
            return str(exc)

    with ThreadPoolExecutor(len(modes)) as pool:
        return list(pool.map(one, modes))


def test_each_request_of_a_batch_answered_by_its_own_sender(daemon: Daemon) -> None:
    assert ask_batch(daemon, ["return", "send", "thread"]) == [
        "returned", "sent by send", "sent from a thread",
    ]  # fmt: skip
    assert ask_batch(daemon, ["async_send", "async_task", "return"]) == [
        "sent by async_send", "sent from a task", "returned",
    ]  # fmt: skip


def test_a_batch_where_one_sender_sends_twice(daemon: Daemon) -> None:
    """The request that sent twice gets Triton's "got 2"; one its sender answered before keeps
    its answer; the rest fail with the exception execute() raised (Triton 2.51 answered the
    same; once, it then aborted in malloc_consolidate). The requests arrive in any order, and
    the model only answers those before the one that raises."""
    sent, two, returned = ask_batch(daemon, ["send", "two", "return"])
    failed = (
        f"[StatusCode.INTERNAL] Failed to process the request(s) for model '{BATCHED}_0_0', "
        "message: TritonModelException: Unable to send response. Non-decoupled model cannot "
        "send more than one response."
    )
    assert two == "[StatusCode.INTERNAL] expected a single response, got 2"
    assert returned.startswith(failed)
    assert sent == "sent by send" or sent.startswith(failed)
