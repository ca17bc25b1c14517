"""Helpers for fault and overload tests: requests held in the ``gated`` model for as long as
a test needs, and background traffic on another model that must all succeed."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from pbd_harness import SETTLE_TIMEOUT_S, Daemon, _is_alive, _proc_stat, infer_input, wait_until

# Bounds on the background traffic: it stops when the test is done, or after this many.
BACKGROUND_MAX_REQUESTS = 5_000


def gated_inputs(
    ident: int, gate: Path | None = None, payload_bytes: int = 0
) -> list[grpcclient.InferInput]:
    inputs = [infer_input("ID", np.array([ident], dtype=np.int32), "INT32")]
    if gate is not None:
        path = np.array([str(gate).encode()], dtype=np.object_)
        inputs.append(infer_input("GATE", path, "BYTES"))
    if payload_bytes:
        inputs.append(infer_input("PAYLOAD", np.zeros(payload_bytes, dtype=np.uint8), "UINT8"))
    return inputs


def executing(gate: Path) -> Path:
    return gate.with_name(gate.name + ".executing")


def hold_gated(
    pool: ThreadPoolExecutor, daemon: Daemon, gate: Path, ident: int = 0
) -> Future[grpcclient.InferResult]:
    """Send a ``gated`` request that stays in execute() until ``gate`` is removed; return once
    the model runs it."""
    gate.touch()
    client = daemon.client()
    future = pool.submit(
        client.infer, "gated", gated_inputs(ident, gate), client_timeout=SETTLE_TIMEOUT_S
    )

    def running() -> bool:
        if future.done():
            future.result()
            raise AssertionError("the gated request finished before its gate opened")
        return executing(gate).exists()

    wait_until(running, SETTLE_TIMEOUT_S, "the gated request to reach the model")
    return future


def add_sub_once(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
    result = client.infer("add_sub", inputs, client_timeout=SETTLE_TIMEOUT_S)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


@contextlib.contextmanager
def background_add_sub(daemon: Daemon) -> Iterator[list[int]]:
    """add_sub requests back to back from another thread while the block runs; every one of
    them must succeed. Yields a one-element list: how many have succeeded so far."""
    done = [0]
    stop = threading.Event()
    errors: list[BaseException] = []
    client = daemon.client()

    def loop() -> None:
        while not stop.is_set() and done[0] < BACKGROUND_MAX_REQUESTS:
            try:
                add_sub_once(client)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                return
            done[0] += 1

    thread = threading.Thread(target=loop, name="background add_sub")
    thread.start()
    try:
        wait_until(lambda: done[0] or errors, SETTLE_TIMEOUT_S, "background traffic to start")
        yield done
    finally:
        stop.set()
        thread.join(SETTLE_TIMEOUT_S)
    assert not errors, f"a request on another model failed: {errors[0]!r}"
    assert done[0] > 0


def assert_no_orphan(pid: int) -> None:
    """The worker ``pid`` (seen earlier) has exited and been reaped."""
    stat = _proc_stat(pid)
    if stat is None:
        return
    start = stat[2]
    wait_until(lambda: not _is_alive(pid, start), SETTLE_TIMEOUT_S, f"worker {pid} to exit")


def assert_no_stale_segments(daemon: Daemon) -> None:
    """Only live instances (and front ends) own segments (a replaced one's are gone)."""
    live = len(daemon.workers()) + daemon.front_ends()
    wait_until(
        lambda: len(daemon.segment_owners()) <= live,
        SETTLE_TIMEOUT_S,
        f"at most {live} instances to own segments (have {sorted(daemon.segment_owners())})",
    )
