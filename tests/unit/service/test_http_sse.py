"""Server-sent events through a real aiohttp server: the bound on what waits for a slow client,
the writer's back-pressure, and a producer cancelled with its handler."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from pbd.http.sse import EventStream, event, send_events
from pbd.responses import HELD_RESPONSE_OVERHEAD, BacklogFull

WAIT_S = 10.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))


def test_event_is_one_data_line_and_a_blank_line() -> None:
    assert event(b'{"a":1}') == b'data: {"a":1}\n\n'


def test_the_backlog_is_bounded_but_one_large_event_alone_is_taken() -> None:
    async def scenario() -> None:
        events = EventStream(limit=10)
        events.put(b"x" * 25)  # alone: taken, whatever its size
        with pytest.raises(BacklogFull) as full:
            events.put(b"y")
        held = 25 + HELD_RESPONSE_OVERHEAD
        assert f"{held + 1 + HELD_RESPONSE_OVERHEAD} bytes" in str(full.value)
        assert "--http-stream-buffer-bytes" in str(full.value)
        assert events.backlog == held
        events.end(b"last")  # the closing event goes past the limit
        assert events.backlog == held + 4 + HELD_RESPONSE_OVERHEAD
        events.put(b"after")  # ended: dropped
        assert events.backlog == held + 4 + HELD_RESPONSE_OVERHEAD

    run(scenario)


def test_a_flood_of_tiny_events_is_bounded_by_their_count_too() -> None:
    """Each event waiting costs more than its bytes (the objects around it): counted as
    ``held_cost``, as gRPC streams count theirs, so tiny events cannot pile up by the
    hundred thousand under a limit meant for bytes."""

    async def scenario() -> None:
        events = EventStream(limit=64 * 1024)
        taken = 0
        with pytest.raises(BacklogFull):
            for _ in range(64 * 1024):  # one-byte events: bytes alone would take them all
                events.put(b"t")
                taken += 1
        assert taken == 64 * 1024 // (1 + HELD_RESPONSE_OVERHEAD)

    run(scenario)


async def _serve(
    produce: Callable[[EventStream], Awaitable[None]], limit: int, done: asyncio.Event
) -> TestServer:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await send_events(response, EventStream(limit), produce)
            await response.write_eof()
        finally:
            done.set()
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    server = TestServer(app, handler_cancellation=True)
    await server.start_server()
    return server


async def _body(produce: Callable[[EventStream], Awaitable[None]]) -> bytes:
    """The body of one GET answered with ``produce``'s events, as it came (chunked)."""
    server = await _serve(produce, 1 << 20, asyncio.Event())
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw = await reader.read()
        writer.close()
    finally:
        await server.close()
    return raw.split(b"\r\n\r\n", 1)[1]


def test_events_arrive_in_order_then_the_response_ends() -> None:
    async def scenario() -> None:
        async def produce(events: EventStream) -> None:
            for n in range(3):
                events.put(event(str(n).encode()))
                await asyncio.sleep(0)

        body = await _body(produce)
        assert b"data: 0\n\n" in body and body.index(b"data: 0") < body.index(b"data: 2")

    run(scenario)


def _chunks(body: bytes) -> list[bytes]:
    """The chunks of a chunked HTTP/1.1 body, the last (empty) one left out."""
    chunks = []
    while True:
        size, _, body = body.partition(b"\r\n")
        length = int(size, 16)
        if not length:
            return chunks
        chunks.append(body[:length])
        body = body[length + 2 :]


def test_events_waiting_for_the_writer_leave_in_one_write() -> None:
    """A burst put while the writer waits is one chunk (one system call), not one each; the
    first event, put alone, is not held back for the others."""

    async def scenario() -> None:
        async def produce(events: EventStream) -> None:
            events.put(event(b"first"))
            await asyncio.sleep(0.05)
            for n in range(5):
                events.put(event(str(n).encode()))

        body = await _body(produce)
        burst = b"".join(event(str(n).encode()) for n in range(5))
        assert _chunks(body) == [event(b"first"), burst]

    run(scenario)


def test_a_client_that_does_not_read_holds_the_writer_and_at_most_the_limit() -> None:
    """The producer is never held back; the writer waits in aiohttp's drain; what waits in
    between stays under the limit, and the producer learns when it would pass it."""

    async def scenario() -> None:
        done = asyncio.Event()
        limit = 256 * 1024
        chunk = b"z" * 16384
        outcome: dict[str, int] = {}

        async def produce(events: EventStream) -> None:
            sent = 0
            try:
                while True:
                    events.put(event(chunk))
                    sent += 1
                    await asyncio.sleep(0.001)
            except BacklogFull:
                outcome["sent"] = sent
                outcome["backlog"] = events.backlog
                events.end(event(b"too slow"))

        server = await _serve(produce, limit, done)
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port, limit=1024)
            # A small receive buffer, so the daemon's side fills up soon; nothing is read.
            writer.transport.pause_reading()
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while "sent" not in outcome:
                await asyncio.sleep(0.01)
            assert outcome["backlog"] <= limit
            writer.transport.resume_reading()
            raw = await reader.read()
            writer.close()
            await done.wait()
        finally:
            await server.close()
        # Everything put before the limit arrives, then the closing event.
        assert raw.count(b"data: z") == outcome["sent"]
        assert raw.endswith(b"data: too slow\n\n\r\n0\r\n\r\n")  # then the last chunk

    run(scenario)


def test_a_client_that_goes_away_cancels_the_producer() -> None:
    async def scenario() -> None:
        done = asyncio.Event()
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def produce(events: EventStream) -> None:
            events.put(event(b"first"))
            started.set()
            try:
                await asyncio.Event().wait()  # a model that is slow to answer
            except asyncio.CancelledError:
                cancelled.set()
                raise

        server = await _serve(produce, 1 << 20, done)
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await started.wait()
            await reader.readuntil(b"data: first\n\n")
            writer.close()
            await cancelled.wait()
            await done.wait()
        finally:
            await server.close()

    run(scenario)
