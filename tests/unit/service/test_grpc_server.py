"""pbd.grpc.server: the listener's limits from the settings, and the connection limit held on
a real socket."""

from __future__ import annotations

import asyncio
import resource

import pytest

from pbd.grpc.calls import Calls
from pbd.grpc.server import AUTO_MAX_CONNECTIONS, GrpcServer, limits, max_connections
from pbd.h2 import frames as f
from pbd.listeners import Sharing, grpc_sockets
from pbd.settings import Settings


def test_limits_come_from_the_settings() -> None:
    settings = Settings(
        grpc_max_header_list_bytes=9000,
        grpc_idle_timeout_secs=0.0,
        grpc_http2_min_recv_ping_interval_without_data=10_000,
        grpc_http2_max_ping_strikes=0,
        grpc_keepalive_permit_without_calls=True,
    )
    made = limits(settings)
    assert made.max_header_list == 9000 and made.idle_timeout == 0.0
    assert made.min_ping_interval == 10.0 and made.max_ping_strikes == 0
    assert made.pings_without_calls


def test_the_connection_limit_defaults_to_a_share_of_the_open_file_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    auto = max_connections(Settings())
    assert 1 <= auto <= AUTO_MAX_CONNECTIONS and auto < max(soft, 2)
    assert max_connections(Settings(grpc_max_connections=7)) == 7


async def _frames_until_closed(reader: asyncio.StreamReader) -> list[tuple[int, bytes]]:
    frames = []
    while True:
        try:
            head = await asyncio.wait_for(reader.readexactly(9), 10)
            payload = await reader.readexactly(int.from_bytes(head[:3], "big"))
        except (asyncio.IncompleteReadError, ConnectionResetError):
            return frames
        frames.append((head[3], payload))


def test_connections_past_the_limit_are_refused_and_a_freed_place_serves_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        settings = Settings(grpc_address="127.0.0.1", grpc_port=0, grpc_max_connections=2)
        server = GrpcServer(Calls({}, 1 << 20, None), settings, None)
        port = await server.start()
        try:
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            while len(server.connections) < 2:
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f.PREFACE + f.settings({}))
            frames = await _frames_until_closed(reader)
            assert frames[-1][0] == f.GOAWAY
            assert int.from_bytes(frames[-1][1][4:8], "big") == f.ENHANCE_YOUR_CALM
            assert b"connection limit (2) reached" in frames[-1][1]
            writer.close()
            held[0][1].close()
            while len(server.connections) > 1:
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f.PREFACE + f.settings({}))
            first = await reader.readexactly(9)
            assert first[3] == f.SETTINGS  # served: the server's SETTINGS, no GOAWAY
            writer.close()
            held[1][1].close()
        finally:
            await server.stop(0)

    asyncio.run(main())
    assert "--grpc-max-connections 2" in caplog.text


def test_a_shared_sockets_accepts_and_closes_are_told_to_the_other_front_ends() -> None:
    # With front ends, each publishes its connection count when it changes: a count left
    # high by a connection that closed would send the next connections elsewhere.
    told: list[tuple[str, int]] = []

    async def main() -> None:
        settings = Settings(grpc_address="127.0.0.1", grpc_port=0)
        [sock] = grpc_sockets(settings)
        server = GrpcServer(Calls({}, 1 << 20, None), settings, None)
        sharing = Sharing(
            changed=lambda starting: told.append((f"{len(server.connections)}", starting))
        )
        port = await server.start([sock], sharing)
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            while len(server.connections) < 1:
                await asyncio.sleep(0.01)
            writer.close()
            while server.connections:
                await asyncio.sleep(0.01)
        finally:
            await server.stop(0)
            sock.close()  # a shared socket outlives the server: the other front ends use it

    asyncio.run(main())
    # The accept (nothing counted yet, one starting), then the close (none left).
    assert told == [("0", 1), ("0", 0)]
