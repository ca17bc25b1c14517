"""bench.generate's own logic, without pbd or Triton: the client against a small aiohttp server
that streams tokens as generate_stream does (right, or wrong on purpose), medians and the
table. No wall-clock thresholds."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.generate import Run, WrongAnswer, load, median_run, one_stream, parse_args, table


async def _server(skip: int | None) -> TestServer:
    """generate_stream of token_stream; ``skip``: a token index left out (a wrong answer)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        tokens = json.loads(await request.read())["max_tokens"]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(tokens):
            if i != skip:
                await response.write(
                    b"data: " + json.dumps({"text_output": f" t{i}"}).encode() + b"\n\n"
                )
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v2/models/token_stream/generate_stream", handler)
    server = TestServer(app)
    await server.start_server()
    return server


def test_a_closed_loop_counts_requests_tokens_and_first_tokens() -> None:
    async def scenario() -> Run:
        server = await _server(None)
        try:
            return await load("x", server.port or 0, 5, 2, duration=0.3, warmup=0.05)
        finally:
            await server.close()

    run = asyncio.run(scenario())
    assert run.failures == 0 and run.requests > 0
    assert run.tokens_per_s == pytest.approx(run.requests_per_s * 5)
    assert 0 < run.ttft_p50_ms <= run.latency_p50_ms


def test_a_missing_token_is_a_wrong_answer() -> None:
    async def scenario() -> None:
        server = await _server(2)
        try:
            url = f"http://127.0.0.1:{server.port}/v2/models/token_stream/generate_stream"
            async with aiohttp.ClientSession() as session:
                await one_stream(session, url, b'{"max_tokens": 4}', 4)
        finally:
            await server.close()

    with pytest.raises(WrongAnswer, match="event 2"):
        asyncio.run(scenario())


def test_medians_table_and_arguments() -> None:
    runs = [Run("pbd", 1, r, r * 8, 1.0, 2.0, 3.0, 4.0, 10, 0) for r in (10.0, 30.0, 20.0)]
    median = median_run(runs)
    assert (median.requests_per_s, median.tokens_per_s, median.requests) == (20.0, 160.0, 30)
    triton = Run("triton", 1, 10.0, 80.0, 2.0, 2.0, 3.0, 4.0, 10, 0)
    text = table([(triton, median)], 8)
    assert "8 tokens per request" in text and "2.00" in text and "0.50" in text
    opts = parse_args(["--quick", "--tokens", "16", "--concurrency", "1", "4"])
    assert (opts.tokens, opts.concurrency, opts.duration) == (16, [1, 4], 1.0)
    with pytest.raises(SystemExit):
        parse_args(["--tokens", "0"])
