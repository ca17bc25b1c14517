"""Helpers for the streaming, decoupled and cancellation tests: a repository of the stream
models, their inputs, and a stream collector over tritonclient's callback."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from pbd_harness import TEST_MODELS, Daemon, DaemonFactory, infer_input, make_repository

STREAM_TIMEOUT_S = 60.0
STREAM_MODELS = (
    "repeat_decoupled",
    "decoupled_misuse",
    "default_sender",
    "cancel_probe",
    "cancel_probe_decoupled",
    "raise_in_execute",
    "gated",
    "async_decoupled",
)


def stream_daemon(start_daemon: DaemonFactory, tmp_path: Path, *args: str) -> Daemon:
    repository = make_repository(tmp_path, {m: TEST_MODELS / m for m in STREAM_MODELS})
    return start_daemon(repository, *args, settle=list(STREAM_MODELS))


def repeat_inputs(values: list[int], delay_ms: int = 0, wait_ms: int = 0) -> list[Any]:
    return [
        infer_input("IN", np.array(values, dtype=np.int32), "INT32"),
        infer_input("DELAY", np.full(len(values), delay_ms, dtype=np.uint32), "UINT32"),
        infer_input("WAIT", np.array([wait_ms], dtype=np.uint32), "UINT32"),
    ]


def mode_input(mode: str) -> list[Any]:
    return [infer_input("MODE", np.array([mode.encode()], dtype=np.object_), "BYTES")]


def probe_inputs(ident: int, where: Path) -> list[Any]:
    return [
        infer_input("ID", np.array([ident], dtype=np.int32), "INT32"),
        infer_input("DIR", np.array([str(where).encode()], dtype=np.object_), "BYTES"),
    ]


class Answers:
    """What a stream's callback received, in order: (result, error) pairs."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self._queue.put((result, error))

    def next(self) -> tuple[Any, Any]:
        return self._queue.get(timeout=STREAM_TIMEOUT_S)

    def take(self, count: int) -> list[tuple[Any, Any]]:
        return [self.next() for _ in range(count)]

    def left(self) -> list[tuple[Any, Any]]:
        out = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out


@contextlib.contextmanager
def open_stream(
    daemon: Daemon, headers: dict[str, str] | None = None
) -> Iterator[tuple[grpcclient.InferenceServerClient, Answers]]:
    """A stream on a client of its own (``headers``: the call's metadata); stop_stream()
    (which waits for the server to end the call after the half-close) when the block ends."""
    client = grpcclient.InferenceServerClient(daemon.url)
    answers = Answers()
    client.start_stream(callback=answers, headers=headers)
    try:
        yield client, answers
        client.stop_stream()
    finally:
        client.close()


def final_flag(result: Any) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def text(result: Any, name: str) -> str:
    return result.as_numpy(name)[0].decode()
