"""WorkerLoop: coroutines awaiting replies resume as the main thread waits for its next frame;
a frame for the main loop read meanwhile is handed to it; a failed coroutine is reported."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import encode_frame
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.ipc.daemon_link import DaemonLink


@pytest.fixture
def wired(
    linked: tuple[DaemonLink, socket.socket],
) -> Iterator[tuple[WorkerLoop, socket.socket]]:
    link, conn = linked
    aio = WorkerLoop(link)
    try:
        yield aio, conn
    finally:
        aio.loop.close()


def send(conn: socket.socket, *messages: wpb.DaemonToWorker) -> None:
    conn.sendall(b"".join(encode_frame(m.SerializeToString()) for m in messages))


def reply(call_id: int) -> wpb.DaemonToWorker:
    return wpb.DaemonToWorker(bls_reply=wpb.BlsReply(call_id=call_id, final=True))


def test_each_reply_resumes_its_own_coroutine(wired: tuple[WorkerLoop, socket.socket]) -> None:
    aio, conn = wired
    got: dict[str, int] = {}

    async def call(name: str, call_id: int) -> None:
        got[name] = (await aio.reply(("bls_reply", call_id))).bls_reply.call_id

    aio.spawn(call("a", 1), pytest.fail)
    aio.spawn(call("b", 2), pytest.fail)
    release = wpb.DaemonToWorker(release=wpb.Release(batch_ids=[9]))
    send(conn, reply(2), reply(1), release)
    assert aio.next() == (None, release)
    aio.run(asyncio.sleep(0))  # the coroutines resumed by the last read finish
    assert got == {"a": 1, "b": 2}


def test_without_coroutines_next_is_a_plain_read(wired: tuple[WorkerLoop, socket.socket]) -> None:
    aio, conn = wired
    cancel = wpb.DaemonToWorker(cancel=wpb.CancelRequests(request_ids=[3]))
    send(conn, reply(5), cancel)
    assert aio.next() == (None, cancel)
    assert aio.link.take_reply(("bls_reply", 5)) == reply(5)


def test_run_awaits_while_frames_are_kept(wired: tuple[WorkerLoop, socket.socket]) -> None:
    aio, conn = wired
    release = wpb.DaemonToWorker(release=wpb.Release(batch_ids=[1]))

    async def execute() -> int:
        send(conn, release, reply(7))
        return (await aio.reply(("bls_reply", 7))).bls_reply.call_id

    assert aio.run(execute()) == 7
    assert aio.next() == (None, release)


def test_a_failed_coroutine_is_reported(wired: tuple[WorkerLoop, socket.socket]) -> None:
    aio, conn = wired
    failures: list[BaseException] = []

    async def raises() -> None:
        raise ValueError("on purpose")

    async def cancels_itself() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    aio.spawn(raises(), failures.append)
    aio.spawn(cancels_itself(), failures.append)
    aio.run(asyncio.sleep(0.01))
    assert [type(f) for f in failures] == [ValueError, asyncio.CancelledError]


def test_a_closed_connection_ends_next_and_the_waiters(
    wired: tuple[WorkerLoop, socket.socket],
) -> None:
    aio, conn = wired
    failures: list[BaseException] = []

    async def call() -> None:
        await aio.reply(("bls_reply", 1))

    aio.spawn(call(), failures.append)
    conn.shutdown(socket.SHUT_RDWR)
    assert aio.next() is None
    aio.run(asyncio.sleep(0))
    assert [str(f) for f in failures] == ["the daemon closed the connection"]
