"""``GET /metrics``: Prometheus text format, as Triton serves it on port 8002.

aiohttp on the daemon's event loop, the same loop that updates every counter, so a scrape
reads a consistent state without locks. prometheus_client writes the text. One adjustment:
Triton's counters carry no ``_total`` suffix (``nv_inference_request_success``) and scrapers
are written against those names, while prometheus_client names a counter's HELP and TYPE lines
``<name>_total``; for counters whose samples have the bare name those two lines get the same
name as the samples, so the output reads exactly as Triton's.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Protocol

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

# The classic text format (what generate_latest writes), understood by every scraper.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Source(Protocol):
    def collect(self) -> Iterator[Metric]: ...


class _Gather:
    """The registry handed to prometheus_client: every source, noting counter names."""

    def __init__(self, sources: Iterable[Source]) -> None:
        self.sources = list(sources)
        self.counters: list[str] = []

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            for metric in source.collect():
                if metric.type == "counter":
                    self.counters.append(metric.name)
                yield metric


def exposition(sources: Iterable[Source]) -> bytes:
    gather = _Gather(sources)
    text = generate_latest(gather).decode()
    for name in gather.counters:
        text = text.replace(f"# HELP {name}_total ", f"# HELP {name} ", 1)
        text = text.replace(f"# TYPE {name}_total counter\n", f"# TYPE {name} counter\n", 1)
    return text.encode()


class MetricsServer:
    def __init__(
        self,
        sources: Iterable[Source],
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.sources = list(sources)
        self.before = before  # brings the counters up to date (front ends' direct path)
        self.app = web.Application()
        self.app.router.add_get("/metrics", self.metrics)
        self.runner: web.AppRunner | None = None

    async def metrics(self, request: web.Request) -> web.Response:
        if self.before is not None:
            await self.before()
        body = exposition(self.sources)
        response = web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression()
        return response

    async def start(self, sockets: list[socket.socket]) -> None:
        """Serve on ``sockets``, bound and listening (``pbd.listeners.bind_tcp``: bound with
        the other public sockets, before any front end starts)."""
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        for sock in sockets:
            await web.SockSite(self.runner, sock).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
