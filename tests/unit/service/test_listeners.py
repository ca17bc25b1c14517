"""pbd.listeners: binding the public sockets, and OneByOne, the acceptor of a socket that front
ends share (one connection per wake-up of the loop, the socket left open on close)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import pytest

from pbd.listeners import OneByOne, Sharing, bind_tcp, tcp_port


class Counting(asyncio.Protocol):
    made: list[Counting] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Counting.made.append(self)


def _listening() -> socket.socket:
    [sock] = bind_tcp("127.0.0.1", 0, "test server")
    return sock


@contextlib.contextmanager
def _waiting(count: int) -> Iterator[socket.socket]:
    """A listening socket with ``count`` connections waiting to be accepted; all closed after."""
    sock = _listening()
    port = tcp_port([sock])
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        yield sock
    finally:
        for client in clients:
            client.close()
        sock.close()


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_each_wake_up_takes_one_connection() -> None:
    async def scenario() -> list[int]:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing())
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())  # the test wakes it, once per step
        seen = []
        for _ in range(3):
            acceptor._accept()  # what the loop calls when the socket is readable
            await _turns(5)  # connect_accepted_socket's steps
            seen.append(len(Counting.made))
        acceptor._accept()  # nothing left: no error
        await _turns(5)
        seen.append(len(Counting.made))
        acceptor.close()
        for protocol in Counting.made:
            protocol.transport.close()
        return seen

    with _waiting(3) as sock:
        seen = asyncio.run(scenario())
    # asyncio's own server takes every waiting connection in one wake-up.
    assert seen == [1, 2, 3, 3]


def test_connections_waiting_are_all_served() -> None:
    async def scenario() -> int:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing())
        for _ in range(100):
            if len(Counting.made) == 3:
                break
            await asyncio.sleep(0.01)
        acceptor.close()
        for protocol in Counting.made:
            protocol.transport.close()
        return len(Counting.made)

    with _waiting(3) as sock:
        assert asyncio.run(scenario()) == 3


def test_a_connection_left_to_the_others_is_taken_after_the_delay() -> None:
    sock = _listening()
    port = tcp_port([sock])
    asked = []

    def share(_starting: int) -> bool:  # another process holds fewer connections
        asked.append(True)
        return False

    async def scenario() -> tuple[int, int]:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing(share, 0.3))
        client = socket.create_connection(("127.0.0.1", port))
        await asyncio.sleep(0.1)
        left = len(Counting.made)  # asked, and left to the others
        for _ in range(100):
            if Counting.made:
                break
            await asyncio.sleep(0.02)
        taken = len(Counting.made)  # nobody took it: taken anyway
        acceptor.close()
        client.close()
        for protocol in Counting.made:
            protocol.transport.close()
        return left, taken

    try:
        left, taken = asyncio.run(scenario())
    finally:
        sock.close()
    assert (left, taken) == (0, 1)
    assert asked  # share() was asked before it was left


def test_a_connection_left_to_others_that_are_taking_connections_is_left_again() -> None:
    # The others took connections while this one waited: they are moving, and this one is
    # next for them (a timer of an earlier wait must not grab it). Once they take none for
    # the delay, it is taken.
    sock = _listening()
    port = tcp_port([sock])
    others = [0]

    async def scenario() -> tuple[int, int]:
        Counting.made = []
        acceptor = OneByOne(
            sock, Counting, Sharing(lambda _s: False, 0.05, others=lambda: others[0])
        )
        client = socket.create_connection(("127.0.0.1", port))
        for _ in range(6):  # 0.3 s of others taking connections, one every 0.05 s
            await asyncio.sleep(0.05)
            others[0] += 1
        left = len(Counting.made)
        for _ in range(100):
            if Counting.made:
                break
            await asyncio.sleep(0.02)
        taken = len(Counting.made)
        acceptor.close()
        client.close()
        for protocol in Counting.made:
            protocol.transport.close()
        return left, taken

    try:
        left, taken = asyncio.run(scenario())
    finally:
        sock.close()
    assert (left, taken) == (0, 1)


def test_each_accept_is_told_so_the_others_see_it_at_once() -> None:
    told: list[int] = []

    async def scenario() -> None:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing(changed=told.append))
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())
        acceptor._accept()
        acceptor._accept()
        await _turns(5)
        acceptor.close()
        for protocol in Counting.made:
            protocol.transport.close()

    with _waiting(2) as sock:
        asyncio.run(scenario())
    assert told == [1, 2]  # the connections accepted and starting, at each accept


def test_the_sharing_counts_connections_accepted_and_not_yet_started() -> None:
    # A server counts a connection from its protocol on, a loop turn after the accept; a
    # connection waiting behind it must see the first one counted, or one front end takes
    # several connections opened at once before the others see it hold any.
    asked: list[int] = []

    def mine(starting: int) -> bool:
        asked.append(starting)
        return True

    async def scenario() -> int:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing(mine))
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())  # the test wakes it
        acceptor._accept()  # the first connection: its protocol starts turns later
        acceptor._accept()  # the second, in the same turn
        await _turns(5)
        acceptor._accept()  # nothing waiting now, both started
        await _turns(5)
        acceptor.close()
        for protocol in Counting.made:
            protocol.transport.close()
        return len(Counting.made)

    with _waiting(2) as sock:
        made = asyncio.run(scenario())
    assert made == 2
    assert asked == [0, 1, 0]


def test_a_connection_the_server_counts_already_is_not_counted_as_starting() -> None:
    # The gRPC server counts a connection as it makes its protocol, a loop turn before
    # connect_accepted_socket returns: counted as starting too, one connection made a front
    # end look loaded by two (seen as 3/2/2/1 for 8 connections over 4 front ends).
    asked: list[tuple[int, int]] = []

    def mine(starting: int) -> bool:
        asked.append((len(Counting.made), starting))
        return True

    class CountedAtFactory(Counting):
        def __init__(self) -> None:
            Counting.made.append(self)  # as GrpcServer._connection does

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

    async def scenario() -> None:
        Counting.made = []
        acceptor = OneByOne(sock, CountedAtFactory, Sharing(mine))
        asyncio.get_running_loop().remove_reader(sock.fileno())
        acceptor._accept()
        await asyncio.sleep(0)  # the protocol is made; connect_accepted_socket not done
        assert acceptor._starting  # still starting, as far as its task goes
        acceptor._accept()
        await _turns(5)
        acceptor.close()
        for protocol in Counting.made:
            protocol.transport.close()

    with _waiting(2) as sock:
        asyncio.run(scenario())
    assert asked == [(0, 0), (1, 0)]


def test_close_stops_accepting_and_leaves_the_socket_to_the_others() -> None:
    sock = _listening()
    port = tcp_port([sock])

    async def scenario() -> int:
        Counting.made = []
        acceptor = OneByOne(sock, Counting, Sharing())
        acceptor.close()
        acceptor.close()  # twice is fine
        client = socket.create_connection(("127.0.0.1", port))
        await asyncio.sleep(0.1)
        client.close()
        return len(Counting.made)

    try:
        assert asyncio.run(scenario()) == 0
        # Still listening: another process sharing it would take the connection.
        assert sock.fileno() >= 0
        sock.settimeout(5)
        with socket.create_connection(("127.0.0.1", port)):
            conn, _ = sock.accept()
            conn.close()
    finally:
        sock.close()


def test_bind_tcp_reports_a_taken_port() -> None:
    sock = _listening()
    try:
        with pytest.raises(OSError, match="cannot bind test server to 127.0.0.1"):
            bind_tcp("127.0.0.1", tcp_port([sock]), "test server")
    finally:
        sock.close()
