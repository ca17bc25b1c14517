"""Server-sent events at the client's pace, with a bound on what waits for a slow client.

A streamed answer joins two sides that run at their own speeds. The model's responses arrive
when the model sends them and cannot be held back (one worker socket carries every request of
its instance, so not reading it would stall them all). The client reads when it reads. Between
them sits an :class:`EventStream`: the producer ``put``s each event as bytes (the response's
shared memory already handed back) and never waits; :meth:`EventStream.pump` writes them with
``StreamResponse.write``, which waits in aiohttp's drain while the socket's send buffer is
full (back-pressure from the client). What waits in between is bounded by ``limit`` bytes,
each event counted with what holding it costs beside its bytes (``pbd.responses.held_cost``,
as gRPC streams count theirs: a flood of tiny events is bounded by its count too): a ``put``
past it raises :class:`BacklogFull`, and the producer cancels its request and ends the stream
with an error event. So a client that stops reading holds at most ``limit`` bytes of the
daemon's memory (one event larger than the limit alone is still taken).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from aiohttp import web

from pbd.responses import BacklogFull, held_cost

CONTENT_TYPE = "text/event-stream; charset=utf-8"
JOIN_BYTES = 65536  # events waiting are joined into writes of about this much


def event(payload: bytes) -> bytes:
    """One ``data:`` event. ``payload`` is JSON on one line (as json.dumps writes it)."""
    return b"data: " + payload + b"\n\n"


class EventStream:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: collections.deque[bytes] = collections.deque()
        self._bytes = 0  # put, not yet handed to the transport
        self._ready = asyncio.Event()
        self._closed = False

    @property
    def backlog(self) -> int:
        return self._bytes

    def put(self, data: bytes) -> None:
        """Queue ``data`` for the client (dropped once the stream ended)."""
        if self._closed:
            return
        cost = held_cost(data)
        if self._items and self._bytes + cost > self.limit:
            raise BacklogFull(self._bytes + cost, self.limit, "--http-stream-buffer-bytes")
        self._append(data)

    def end(self, data: bytes = b"") -> None:
        """The last event (past the limit if need be), then the stream ends."""
        if data:
            self._append(data)
        self.close()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def _append(self, data: bytes) -> None:
        if self._closed:
            return
        self._items.append(data)
        self._bytes += held_cost(data)
        self._ready.set()

    async def pump(self, response: web.StreamResponse) -> None:
        """Write the events as they come until the stream ends; each write waits while the
        client is not reading (aiohttp's drain). The events waiting when the writer runs go
        in one write (up to ``JOIN_BYTES``): a burst of a model's responses is one system
        call and one chunk, not one per token, and the first of them is not held back."""
        items = self._items
        while True:
            while items:
                data = items.popleft()
                self._bytes -= held_cost(data)
                if items and len(data) < JOIN_BYTES:
                    parts = [data]
                    size = len(data)
                    while items and size < JOIN_BYTES:
                        more = items.popleft()
                        self._bytes -= held_cost(more)
                        parts.append(more)
                        size += len(more)
                    data = b"".join(parts)
                await response.write(data)
            if self._closed:
                return
            self._ready.clear()
            await self._ready.wait()


async def send_events(
    response: web.StreamResponse,
    events: EventStream,
    produce: Callable[[EventStream], Awaitable[None]],
) -> None:
    """Run ``produce`` (which puts the events) while writing them to the prepared
    ``response``; what ``events`` holds already goes first, at once (with the headers, in one
    write). However this ends (the client gone, the handler cancelled, a write failed),
    ``produce`` is cancelled and awaited: its request is cancelled with it."""

    async def producing() -> None:
        try:
            await produce(events)
        finally:
            events.close()

    producer = asyncio.create_task(producing())
    try:
        await events.pump(response)
        await producer  # done (it closed the stream): its exception, if any, goes up
    finally:
        if not producer.done():
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
