"""``async def execute`` of a decoupled model: requests sent at once to one instance run
concurrently on its event loop, each awaiting its own BLS calls (as on Triton 2.51, checked
once against it); a coroutine that raises or is cancelled fails only its own request.

Each request of bls_async_decoupled waits until all four of its group have started, which
only happens when their coroutines run at once; each stream is a client of its own. Triton's
own QA case for several requests through BLS runs on bls_fanout_async.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    Daemon,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)
from streaming_helpers import final_flag, open_stream

MODEL = "bls_async_decoupled"
FANOUT = "bls_fanout_async"
PEERS = 4
HANG_GUARD_S = 60.0  # only a hang goes past this
_groups = itertools.count()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("async_execute")
    names = (MODEL, "repeat_decoupled", FANOUT, "bls_gate_decoupled")
    models = {name: TEST_MODELS / name for name in names}
    models["add_sub"] = EXAMPLE_MODELS / "add_sub"
    repository = make_repository(workdir, models)
    with running_daemon(repository, workdir, settle=sorted(models)) as running:
        yield running


def inputs(group: str, mode: str, index: int) -> list[Any]:
    return [
        infer_input("GROUP", np.array([group.encode()], np.object_), "BYTES"),
        infer_input("COUNT", np.array([PEERS], np.int32), "INT32"),
        infer_input("MODE", np.array([mode.encode()], np.object_), "BYTES"),
        infer_input("VALUE", np.array([index + 1, index + 2, 0, 0], np.float32), "FP32"),
    ]


def run_group(daemon: Daemon, modes: list[str]) -> list[list[Any]]:
    """Send one request per mode at once, each on its own stream; per request, what came
    back until its final flag: (OUT, PEERS) pairs, or the error text."""
    group = f"g{next(_groups)}"
    with contextlib.ExitStack() as stack:
        streams = [stack.enter_context(open_stream(daemon)) for _ in modes]
        for index, ((client, _), mode) in enumerate(zip(streams, modes, strict=True)):
            client.async_stream_infer(
                MODEL, inputs(group, mode, index), request_id=f"r{index}",
                enable_empty_final_response=True,
            )  # fmt: skip
        got: list[list[Any]] = []
        for _, answers in streams:
            answered: list[Any] = []
            while True:
                result, error = answers.next()
                if error is not None:
                    answered.append(str(error))
                    break
                if result.as_numpy("OUT") is not None:
                    out = result.as_numpy("OUT").tolist()
                    answered.append((out, int(result.as_numpy("PEERS")[0])))
                if final_flag(result):
                    break
            got.append(answered)
    return got


def doubled(index: int) -> list[float]:
    return [2.0 * (index + 1), 2.0 * (index + 2), 0.0, 0.0]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_four_requests_run_at_once_each_with_its_own_bls_answer(daemon: Daemon, mode: str) -> None:
    got = run_group(daemon, [mode] * PEERS)
    assert got == [[(doubled(i), PEERS)] for i in range(PEERS)]


def test_decoupled_bls_streams_into_each_request(daemon: Daemon) -> None:
    got = run_group(daemon, ["stream"] * PEERS)
    assert got == [
        [([float(i + 1)], PEERS), ([float(i + 2)], PEERS), ([0.0], PEERS), ([0.0], PEERS)]
        for i in range(PEERS)
    ]


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        ("raise", "RuntimeError: request r1 raised on purpose"),
        ("cancel_self", "the execute() coroutine was cancelled"),
    ],
)
def test_a_failing_coroutine_fails_only_its_request(daemon: Daemon, mode: str, text: str) -> None:
    """Triton only logs such a coroutine's exception and its request never ends; pbd answers
    it with the error and the final flag."""
    got = run_group(daemon, ["async", mode, "async", "async"])
    assert [got[0], got[2], got[3]] == [[(doubled(i), PEERS)] for i in (0, 2, 3)]
    (error,) = got[1]
    assert error.startswith(
        f"Failed to process the request(s) for model '{MODEL}_0_0', message: {text}"
    ), error


def test_the_instance_serves_on_after_the_failures(daemon: Daemon) -> None:
    got = run_group(daemon, ["async", "sync", "stream", "async"])
    assert got[0] == [(doubled(0), PEERS)] and got[3] == [(doubled(3), PEERS)]


def test_concurrent_execute_multi_request_bls(daemon: Daemon, tmp_path: Path) -> None:
    """Triton's QA case async_execute ConcurrencyTest.test_concurrent_execute_multi_request_bls
    (4 requests on one stream to an ``async def execute`` model that awaits
    ``async_exec(decoupled=True)`` and iterates the responses), told by what the model saw
    rather than by a clock: each request is sent once the previous one's BLS call was, and
    the callee answers a call only once all 4 have arrived. So every request is answered,
    and by a callee that saw all 4 calls, only if an awaited decoupled call leaves the
    worker's event loop free until its first response is in (as Triton's stub does)."""
    group = f"g{next(_groups)}"
    with open_stream(daemon) as (client, answers):
        for index in range(PEERS):
            inputs = [
                infer_input("GROUP", np.array([group.encode()], np.object_), "BYTES"),
                infer_input("COUNT", np.array([PEERS], np.int32), "INT32"),
                infer_input("MARKS", np.array([str(tmp_path).encode()], np.object_), "BYTES"),
            ]
            client.async_stream_infer(
                FANOUT, inputs, request_id=f"q{index}", enable_empty_final_response=True
            )
            mark = tmp_path / f"sent-q{index}"
            wait_until(mark.exists, HANG_GUARD_S, f"request q{index}'s BLS call to be sent")
        got: dict[str, list[Any]] = {f"q{index}": [] for index in range(PEERS)}
        ended = 0
        while ended < PEERS:
            result, error = answers.next()
            assert error is None, error
            answered = result.get_response()
            if result.as_numpy("ARRIVED") is not None:
                pair = (int(result.as_numpy("ARRIVED")[0]), int(result.as_numpy("SENT")[0]))
                got[answered.id].append(pair)
            ended += final_flag(result)
    # Each callee answer saw all 4 calls, and each caller had sent all 4 when it first read.
    assert got == {f"q{index}": [(PEERS, PEERS)] for index in range(PEERS)}
