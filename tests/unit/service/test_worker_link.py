"""WorkerLink: frames in any chunking, in order, to recv() before a handler is attached and to
the handler after; an undecodable frame ends the link; sends leave at once, whole and in
order."""

from __future__ import annotations

import asyncio
import socket

from pbd.worker.link import WorkerLink
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame


def _frame(executed: int) -> bytes:
    message = wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat(executed=executed))
    return encode_frame(message.SerializeToString())


async def _linked() -> tuple[WorkerLink, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    loop = asyncio.get_running_loop()
    _transport, link = await loop.create_unix_connection(WorkerLink, sock=ours)
    theirs.setblocking(True)
    return link, theirs


def test_frames_split_and_joined_arrive_whole_and_in_order() -> None:
    async def go() -> list[int]:
        link, worker = await _linked()
        data = b"".join(_frame(i) for i in range(1, 6))
        # One frame cut across two writes, then the rest in one.
        worker.sendall(data[:3])
        await asyncio.sleep(0.01)
        worker.sendall(data[3:])
        got = []
        for _ in range(5):
            message = await asyncio.wait_for(link.recv(), 5)
            assert message is not None
            got.append(message.heartbeat.executed)
        worker.close()
        assert await asyncio.wait_for(link.recv(), 5) is None  # EOF
        link.close()
        return got

    assert asyncio.run(go()) == [1, 2, 3, 4, 5]


def test_attach_takes_what_recv_left_then_every_frame_as_read() -> None:
    async def go() -> list[object]:
        link, worker = await _linked()
        worker.sendall(_frame(1) + _frame(2))
        await asyncio.sleep(0.05)
        first = await link.recv()
        assert first is not None and first.heartbeat.executed == 1
        seen: list[object] = []
        link.attach(lambda m: seen.append(None if m is None else m.heartbeat.executed))
        assert seen == [2]  # queued before attach: handed over at once
        worker.sendall(_frame(3))
        worker.close()
        for _ in range(100):
            if len(seen) == 3:
                break
            await asyncio.sleep(0.01)
        link.close()
        return seen

    assert asyncio.run(go()) == [2, 3, None]


def test_a_frame_that_does_not_decode_ends_the_link() -> None:
    async def go() -> tuple[object, bool]:
        link, worker = await _linked()
        worker.sendall(encode_frame(b"\xff\xff\xff"))  # not a WorkerToDaemon
        message = await asyncio.wait_for(link.recv(), 5)
        await asyncio.sleep(0.01)
        worker.close()
        return message, link.closing

    message, closing = asyncio.run(go())
    assert message is None and closing


def test_a_handler_that_raises_does_not_end_the_link() -> None:
    async def go() -> list[int]:
        link, worker = await _linked()
        seen: list[int] = []

        def handler(message: wpb.WorkerToDaemon | None) -> None:
            if message is None:
                return
            seen.append(message.heartbeat.executed)
            if message.heartbeat.executed == 1:
                raise RuntimeError("a bug in one handler")

        link.attach(handler)
        worker.sendall(_frame(1) + _frame(2))
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        worker.close()
        link.close()
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(go()) == [1, 2]


def test_sends_arrive_whole_and_in_order() -> None:
    async def go() -> list[int]:
        link, worker = await _linked()
        for batch_id in (1, 2, 3):
            link.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[batch_id])))
            await asyncio.sleep(0)
        link.close()  # the transport closes in a later loop iteration: read off the loop

        def read_all() -> list[int]:
            reader = SocketFrameReader(worker)
            got = []
            while (frame := reader.read()) is not None:
                got.append(wpb.DaemonToWorker.FromString(frame).release.batch_ids[0])
            return got

        got = await asyncio.wait_for(asyncio.to_thread(read_all), 10)
        worker.close()
        return got

    assert asyncio.run(go()) == [1, 2, 3]
