"""The worker's BLS client against the daemon's end of a real socket: a call whose inputs find
no shared memory is answered with Triton's error response (not an exception), and a finished
decoupled response iterator replays its responses when iterated again, as Triton's does; a
decoupled ``async_exec`` resolves once its first response is in, the loop free meanwhile.

The arena that cannot grow is real: its first segment would be 32 TiB, which the filesystem
refuses (EFBIG on ext4, ENOSPC on tmpfs).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame
from pbd_wire.shm import TRITON_PHRASE, Arena, SegmentMap
from pbd_worker.bls import BlsClient, _Batch
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.tensor import Tensor

UNGROWABLE = 1 << 45
HANG_GUARD_S = 30.0  # only a hang goes past this


class Wired:
    def __init__(self, client: BlsClient, aio: WorkerLoop, conn: socket.socket) -> None:
        self.client, self.aio, self.conn = client, aio, conn

    def reply(self, *replies: wpb.BlsReply) -> None:
        frames = [wpb.DaemonToWorker(bls_reply=r).SerializeToString() for r in replies]
        self.conn.sendall(b"".join(encode_frame(f) for f in frames))


def wire(
    linked: tuple[DaemonLink, socket.socket], tmp_path: Path, arena_bytes: int
) -> Iterator[Wired]:
    link, conn = linked
    aio = WorkerLoop(link)
    client = BlsClient(link, str(tmp_path), aio.reply, aio.loop)
    inputs = SegmentMap(str(tmp_path))
    arena = Arena("pbdtest-blsout-", arena_bytes, arena_bytes)
    client.bind(inputs, arena)
    client.begin_batch([])
    try:
        yield Wired(client, aio, conn)
    finally:
        client.end_batch()
        arena.close()
        inputs.close()
        aio.loop.close()


@pytest.fixture
def full(linked: tuple[DaemonLink, socket.socket], tmp_path: Path) -> Iterator[Wired]:
    yield from wire(linked, tmp_path, UNGROWABLE)


@pytest.fixture
def wired(linked: tuple[DaemonLink, socket.socket], tmp_path: Path) -> Iterator[Wired]:
    yield from wire(linked, tmp_path, 1 << 16)


def request() -> InferenceRequest:
    data = Tensor("INPUT0", np.ones((1, 4), np.float32))
    return InferenceRequest(
        model_name="identity_fp32", inputs=[data], requested_output_names=["OUTPUT0"]
    )


def out_of_memory(message: str) -> bool:
    return f"{TRITON_PHRASE} for key 'pbdtest-blsout-0' to {UNGROWABLE} bytes" in message


def test_exec_out_of_shared_memory_is_an_error_response(full: Wired) -> None:
    response = full.client.exec(request(), decoupled=False)
    assert response.has_error() and out_of_memory(response.error().message())
    assert list(os.listdir(full.client.shm_dir)) == []  # nothing half-made left behind


def test_a_decoupled_exec_out_of_shared_memory_yields_one_error_response(full: Wired) -> None:
    responses = full.client.exec(request(), decoupled=True)
    first = next(responses)
    assert first.has_error() and out_of_memory(first.error().message())
    with pytest.raises(StopIteration):
        next(responses)


def test_async_exec_out_of_shared_memory_is_an_error_response(full: Wired) -> None:
    async def calls() -> tuple[Any, Any]:
        plain = await full.client.exec_async(request(), decoupled=False)
        decoupled = await full.client.exec_async(request(), decoupled=True)
        return plain, next(decoupled)

    plain, first = full.aio.run(calls())
    for response in (plain, first):
        assert response.has_error() and out_of_memory(response.error().message())


def test_a_finished_response_iterator_replays_its_responses(wired: Wired) -> None:
    wired.reply(
        wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json='{"n": 1}')),
        wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json='{"n": 2}')),
        wpb.BlsReply(call_id=1, final=True),  # a final flag alone: a last, empty response
    )
    responses = wired.client.exec(request(), decoupled=True)
    first = list(responses)
    assert [r.parameters() for r in first] == ['{"n": 1}', '{"n": 2}', "{}"]
    assert next(responses, None) is None  # next() alone does not start over
    assert list(responses) == first  # iter() does: the same responses again
    again = iter(responses)
    assert next(again) is first[0]
    assert list(again) == first[1:]  # an unfinished replay resumes where it was


def test_async_exec_on_the_worker_loop_still_awaits_its_reply(wired: Wired) -> None:
    wired.reply(wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json="{}"), final=True))

    async def call() -> Any:
        return await wired.client.exec_async(request(), decoupled=False)

    response = wired.aio.run(asyncio.wait_for(call(), 30))
    assert not response.has_error()


def test_a_batch_names_the_bls_calls_it_serves_and_its_first_trace() -> None:
    execute = wpb.Execute(
        requests=[
            wpb.Request(request_id=1),
            wpb.Request(request_id=2, bls_call=5, traceparent="00-a"),
            wpb.Request(request_id=3, bls_call=6, traceparent="00-b"),
        ]
    )
    batch = _Batch(execute.requests)
    assert (batch.parents, batch.traceparent) == ([5, 6], "00-a")
    assert (_Batch().parents, _Batch().traceparent) == ([], "")


def test_a_decoupled_async_exec_resolves_once_its_first_response_is_in(wired: Wired) -> None:
    """As Triton's stub: the awaited iterator holds its first response, so a coroutine that
    iterates it synchronously does not block the loop, and other coroutines' calls are sent
    while it waits."""
    wired.conn.settimeout(HANG_GUARD_S)
    reader = SocketFrameReader(wired.conn)

    def sent_call() -> int:
        return wpb.WorkerToDaemon.FromString(reader.read() or b"").bls_call.call_id

    async def calls() -> tuple[list[Any], list[Any]]:
        first = asyncio.ensure_future(wired.client.exec_async(request(), decoupled=True))
        for _ in range(10):  # turns enough for a task that has nothing to wait for to end
            await asyncio.sleep(0)
        assert not first.done()  # nothing answered yet
        second = asyncio.ensure_future(wired.client.exec_async(request(), decoupled=True))
        assert [sent_call(), sent_call()] == [1, 2]
        wired.reply(
            wpb.BlsReply(call_id=2, response=wpb.Response(parameters_json='{"c": 2}'), final=True),
            wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json='{"c": 1, "n": 1}')),
            wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json='{"c": 1, "n": 2}')),
            wpb.BlsReply(call_id=1, final=True),
        )
        later, earlier = await second, await first
        return list(earlier), list(later)

    earlier, later = wired.aio.run(asyncio.wait_for(calls(), HANG_GUARD_S))
    assert [r.parameters() for r in earlier] == ['{"c": 1, "n": 1}', '{"c": 1, "n": 2}', "{}"]
    assert [r.parameters() for r in later] == ['{"c": 2}']


def test_a_decoupled_exec_returns_with_its_first_response(wired: Wired) -> None:
    wired.reply(wpb.BlsReply(call_id=1, response=wpb.Response(parameters_json="{}"), final=True))
    responses = wired.client.exec(request(), decoupled=True)
    assert wired.client._calls == {}  # the call is over: its one reply was read by exec
    assert [r.parameters() for r in responses] == ["{}"]
    assert [r.parameters() for r in responses] == ["{}"]  # and replayed
