"""pbd.worker.hub: the socket workers connect to. A worker is handed to whoever expects it once
it says hello with the right token; a stranger, a wrong token, a worker nobody expects or a
first frame that is no hello is dropped; closing the hub fails who still waits."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

import pytest
from worker_samples import hub_address

from pbd.errors import Code, PbdError
from pbd.worker.hub import REFUSALS_PER_LINE, WorkerHub
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import HEADER, decode_length, encode_frame, socket_address


def run(test: Callable[[WorkerHub], Awaitable[None]]) -> None:
    async def main() -> None:
        hub = WorkerHub(hub_address())
        await hub.start()
        try:
            await asyncio.wait_for(test(hub), 10.0)
        finally:
            await hub.close()

    asyncio.run(main())


async def connect(
    hub: WorkerHub, first: wpb.WorkerToDaemon
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(socket_address(hub.address))
    writer.write(encode_frame(first.SerializeToString()))
    return reader, writer


def hello(instance: str, token: str, pid: int = 4242) -> wpb.WorkerToDaemon:
    return wpb.WorkerToDaemon(hello=wpb.Hello(instance=instance, token=token, pid=pid))


def test_the_expected_worker_with_its_token_is_handed_over() -> None:
    async def test(hub: WorkerHub) -> None:
        connected = hub.expect("m/1/m_0", "secret")
        reader, writer = await connect(hub, hello("m/1/m_0", "secret"))
        link = await connected
        assert link.pid == 4242 and link.hello is not None and link.hello.instance == "m/1/m_0"
        writer.write(
            encode_frame(wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat()).SerializeToString())
        )
        assert (await link.recv()) == wpb.WorkerToDaemon(
            heartbeat=wpb.Heartbeat()
        )  # for the instance
        link.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[1])))
        frame = await reader.readexactly(HEADER.size)
        sent = wpb.DaemonToWorker.FromString(await reader.readexactly(decode_length(frame)))
        assert list(sent.release.batch_ids) == [1]
        link.close()
        writer.close()
        await writer.wait_closed()

    run(test)


@pytest.mark.parametrize(
    "first",
    [
        hello("m/1/m_0", "wrong"),  # a bad token
        hello("m/1/other", "secret"),  # nobody expects it
        wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat()),  # no hello first
    ],
)
def test_anyone_else_is_dropped(first: wpb.WorkerToDaemon) -> None:
    async def test(hub: WorkerHub) -> None:
        connected = hub.expect("m/1/m_0", "secret")
        reader, writer = await connect(hub, first)
        assert await reader.read() == b""  # the hub closed the connection
        assert not connected.done()
        writer.close()
        await writer.wait_closed()
        hub.forget("m/1/m_0")

    run(test)


@pytest.mark.parametrize("vouched", [True, False])
def test_a_process_its_launcher_vouches_for_is_taken_with_any_token(vouched: bool) -> None:
    """A systemd unit's main process whose token was lost: the hub takes that process (by
    SO_PEERCRED, not by what its hello says) with the token it has; any other is dropped."""

    async def test(hub: WorkerHub) -> None:
        connected = hub.expect("m/1/m_0", "new-secret")
        hub.vouch("m/1/m_0", os.getpid() if vouched else os.getpid() + 1)
        reader, writer = await connect(hub, hello("m/1/m_0", "old-secret", pid=os.getpid() + 1))
        if vouched:
            link = await connected
            assert link.hello is not None and link.hello.token == "old-secret"
            link.close()
        else:
            assert await reader.read() == b""
            assert not connected.done()
            hub.forget("m/1/m_0")
        writer.close()
        await writer.wait_closed()

    run(test)


def test_a_vouch_lasts_for_one_expected_connection() -> None:
    async def test(hub: WorkerHub) -> None:
        hub.expect("m/1/m_0", "secret")
        hub.vouch("m/1/m_0", os.getpid())
        connected = hub.expect("m/1/m_0", "secret")  # expected again: a fresh worker
        reader, writer = await connect(hub, hello("m/1/m_0", "old-secret"))
        assert await reader.read() == b""
        assert not connected.done()
        writer.close()
        await writer.wait_closed()
        hub.forget("m/1/m_0")

    run(test)


def test_closing_the_hub_fails_who_still_waits() -> None:
    async def test(hub: WorkerHub) -> None:
        connected = hub.expect("m/1/m_0", "secret")
        await hub.close()
        with pytest.raises(PbdError) as caught:
            await connected
        assert caught.value.code is Code.UNAVAILABLE
        assert caught.value.message == "daemon is shutting down"

    run(test)


def test_a_worker_refused_again_and_again_is_logged_once_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker with a stale token calls back (backing off): its refusals must not flood the
    journal (issue #31 saw ~100,000 lines)."""

    async def test(hub: WorkerHub) -> None:
        hub.expect("m/1/m_0", "secret")
        for _ in range(REFUSALS_PER_LINE + 1):
            reader, writer = await connect(hub, hello("m/1/m_0", "stale"))
            assert await reader.read() == b""
            writer.close()
            await writer.wait_closed()
        hub.forget("m/1/m_0")

    with caplog.at_level(logging.INFO, logger="pbd.instances"):
        run(test)
    assert [r.getMessage() for r in caplog.records] == [
        "refused a worker connection: bad token for 'm/1/m_0'",
        f"refused {REFUSALS_PER_LINE} worker connections so far: bad token for 'm/1/m_0'",
    ]
