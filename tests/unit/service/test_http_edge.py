"""pbd.http.edge: the requests it reads and answers itself, and the connections it hands over
to aiohttp (a real aiohttp server here, and a real socket for the client)."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from pbd.errors import Code, PbdError
from pbd.http import edge as edge_module
from pbd.http.edge import Edge, Head, Reply, Route, encode_reply, error_reply, parse_head

WAIT_S = 10.0


def test_a_plain_request_is_read_here() -> None:
    raw = (
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n"
        b"Connection: close\r\nAccept-Encoding: identity"
    )
    parsed = parse_head(raw)
    assert parsed is not None
    head, nbytes = parsed
    assert (head.method, head.path, nbytes) == (b"POST", "/v2/models/m/infer", 12)
    assert head.header("HOST") == "x" and head.header("connection") == "close"
    assert head.header("traceparent") is None


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /v2/models/m/infer HTTP/1.0\r\nContent-Length: 1",  # another version
        b"POST /v2/models/m/infer HTTP/1.1",  # a POST without Content-Length
        b"POST /v2/models/m/infer HTTP/1.1\r\nTransfer-Encoding: chunked",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue",
        b"GET /v2/health/live HTTP/1.1\r\nUpgrade: h2c",
        b"GET /v2/health/live HTTP/1.1\r\nConnection: upgrade",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: -1",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 1e3",
        b"GET /v2/health/live HTTP/1.1\r\nX-A: 1\r\n folded",  # obs-fold
        b"GET /v2/health/live HTTP/1.1\r\nX-A : 1",  # whitespace before the colon
        b"GET /v2/health/live HTTP/1.1\r\nno colon",
        b"GET /v2/health/live?x=1 HTTP/1.1",  # a query
        b"GET /v2/models/a%2Fb/ready HTTP/1.1",  # an escaped path
        b"GET http://h/v2/health/live HTTP/1.1",  # an absolute form
        b"GET  /v2/health/live HTTP/1.1",  # two spaces
        "GET /v2/models/é/ready HTTP/1.1".encode(),  # not ASCII
        b"GET /v2/health/live HTTP/1.1\r\nX-A: 1\nX-B: 2",  # a bare LF inside the head
        b"GET /v2/health/live HTTP/1.1\r\nX-A: 1\rX-B: 2",  # a bare CR
        b"GET /v2/health/live HTTP/1.1\r\nX-A: 1\x00",  # a control character in a value
        b"GET /v2/health/live HTTP/1.1\r\nX\x7fA: 1",  # a name that is not a token
        b"get /v2/health/live HTTP/1.1",  # a method is upper case
        b'GET /v2/models/"m"/ready HTTP/1.1',  # a path character that must be escaped
    ],
)
def test_anything_else_goes_to_aiohttp(raw: bytes) -> None:
    assert parse_head(raw) is None


def test_encoded_bodies_and_compressed_answers_are_read_here() -> None:
    raw = (
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 1\r\nContent-Encoding: gzip\r\n"
        b"Accept-Encoding: gzip, deflate"
    )
    parsed = parse_head(raw)
    assert parsed is not None
    assert parsed[0].header("content-encoding") == "gzip"


def test_replies_are_encoded_as_aiohttp_sends_them() -> None:
    reply = Reply(200, b"{}", "application/json", (("Inference-Header-Content-Length", "2"),))
    assert encode_reply(reply, close=False) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Inference-Header-Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert encode_reply(Reply(400), close=True) == (
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    error = error_reply(PbdError(Code.NOT_FOUND, "no such model"))
    assert (error.status, json.loads(error.body)) == (404, {"error": "no such model"})


class _Routes:
    """The edge's routes for these tests: POST /echo (the body back, after ``gate``), GET /fail
    (a PbdError), GET /boom (a bug). Every other request is aiohttp's."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.cancelled = asyncio.Event()
        self.seen: list[str] = []

    def __call__(self, head: Head) -> Route | None:
        routes: dict[tuple[bytes, str], Callable[[Head, bytes], Awaitable[Reply]]] = {
            (b"POST", "/echo"): self.echo,
            (b"GET", "/fail"): self.fail,
            (b"GET", "/boom"): self.boom,
        }
        return routes.get((head.method, head.path))

    async def echo(self, head: Head, body: bytes) -> Reply:
        self.seen.append(body.decode())
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return Reply(200, b"edge:" + body, "text/plain")

    async def fail(self, head: Head, body: bytes) -> Reply:
        raise PbdError(Code.INVALID_ARG, "bad request")

    async def boom(self, head: Head, body: bytes) -> Reply:
        raise RuntimeError("a bug")


async def _aiohttp_echo(request: web.Request) -> web.Response:
    return web.Response(body=b"aiohttp:" + await request.read(), content_type="text/plain")


@asynccontextmanager
async def _serving(
    routes: _Routes, max_body: int = 1 << 20
) -> AsyncIterator[tuple[int, set[Edge]]]:
    app = web.Application(client_max_size=max_body)
    app.router.add_route("*", "/{tail:.*}", _aiohttp_echo)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    assert runner.server is not None
    edges: set[Edge] = set()
    aiohttp_server = runner.server
    server = await asyncio.get_running_loop().create_server(
        lambda: Edge(routes, aiohttp_server, max_body, edges), "127.0.0.1", 0
    )
    try:
        yield server.sockets[0].getsockname()[1], edges
    finally:
        server.close()
        await asyncio.gather(*(edge.stop(1.0) for edge in list(edges)))
        await runner.cleanup()


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", 0))), WAIT_S)
    return status, headers, body


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


def test_pipelined_requests_are_answered_in_order_then_one_for_aiohttp() -> None:
    async def run() -> None:
        routes = _Routes()
        async with _serving(routes) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Three at once: two the edge answers, then one it does not (chunked).
            writer.write(
                _post("/echo", b"one") + _post("/echo", b"two")
                + b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"5\r\nthree\r\n0\r\n\r\n"
            )  # fmt: skip
            got = [await _read_reply(reader) for _ in range(3)]
            assert [body for _, _, body in got] == [b"edge:one", b"edge:two", b"aiohttp:three"]
            assert len(edges) == 0  # aiohttp holds the connection now
            writer.write(_post("/echo", b"four"))  # and serves what follows
            assert (await _read_reply(reader))[2] == b"aiohttp:four"
            writer.close()

    asyncio.run(run())


def test_errors_keep_the_connection_and_a_bug_closes_it() -> None:
    async def run() -> None:
        async with _serving(_Routes()) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /fail HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, body = await _read_reply(reader)
            assert (status, json.loads(body)) == (400, {"error": "bad request"})
            assert headers["content-type"] == "application/json"  # Triton's, exactly
            writer.write(b"GET /boom HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, _ = await _read_reply(reader)
            assert (status, headers["connection"]) == (500, "close")
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()

    asyncio.run(run())


def test_connection_close_is_honoured() -> None:
    async def run() -> None:
        async with _serving(_Routes()) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", b"x", "Connection: close\r\n"))
            status, headers, body = await _read_reply(reader)
            assert (status, headers["connection"], body) == (200, "close", b"edge:x")
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()

    asyncio.run(run())


def test_a_client_that_leaves_cancels_its_request() -> None:
    async def run() -> None:
        routes = _Routes()
        routes.gate.clear()  # the route waits until cancelled
        async with _serving(routes) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", b"slow"))
            while routes.seen != ["slow"]:
                await asyncio.sleep(0.01)
            writer.close()
            await asyncio.wait_for(routes.cancelled.wait(), WAIT_S)
            while edges:
                await asyncio.sleep(0.01)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (_post("/echo", b"x" * 2048), 413),  # past the body limit: aiohttp refuses it
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 400),  # a head past the edge's limit
    ],
)
def test_what_the_edge_does_not_take_aiohttp_refuses(request_bytes: bytes, status: int) -> None:
    async def run() -> None:
        async with _serving(_Routes(), max_body=1024) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request_bytes)
            got, _, _ = await _read_reply(reader)
            assert got == status
            writer.close()

    asyncio.run(run())


def test_a_client_far_ahead_of_its_answers_is_not_read_until_they_go() -> None:
    async def run() -> None:
        routes = _Routes()
        routes.gate.clear()
        async with _serving(routes) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", b"first") + _post("/echo", b"y" * 200_000))
            while routes.seen != ["first"]:
                await asyncio.sleep(0.01)
            (edge,) = edges
            while not edge.paused:
                await asyncio.sleep(0.01)
            routes.gate.set()
            assert (await _read_reply(reader))[2] == b"edge:first"
            assert (await _read_reply(reader))[2] == b"edge:" + b"y" * 200_000
            writer.close()

    asyncio.run(run())


def test_stop_answers_what_is_being_answered_then_closes() -> None:
    async def run() -> None:
        routes = _Routes()
        routes.gate.clear()
        async with _serving(routes) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", b"last"))
            while routes.seen != ["last"]:
                await asyncio.sleep(0.01)
            (edge,) = edges
            stopping = asyncio.ensure_future(edge.stop(WAIT_S))
            await asyncio.sleep(0.05)
            routes.gate.set()
            await stopping
            status, headers, body = await _read_reply(reader)
            assert (status, headers["connection"], body) == (200, "close", b"edge:last")
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()

    asyncio.run(run())


def test_a_body_that_comes_in_pieces_is_joined_and_what_follows_is_read_next() -> None:
    async def run() -> None:
        async with _serving(_Routes()) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = _post("/echo", b"z" * 300_000)
            cut = request.index(b"\r\n\r\n") + 10  # the head and 6 bytes of the body
            pieces = [request[:cut]]
            pieces += [request[i : i + 100_000] for i in range(cut, len(request), 100_000)]
            pieces[-1] += _post("/echo", b"next")  # the next request right behind the body
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
                if piece is pieces[0]:
                    (edge,) = edges
                    assert edge.body is not None  # the head is read, the body awaited
            assert (await _read_reply(reader))[2] == b"edge:" + b"z" * 300_000
            assert (await _read_reply(reader))[2] == b"edge:next"
            writer.close()

    asyncio.run(run())


def test_a_request_whose_lines_end_with_lf_alone_goes_to_aiohttp_at_once() -> None:
    async def run() -> None:
        async with _serving(_Routes()) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /echo HTTP/1.1\nHost: t\nContent-Length: 2\n\nhi")
            status, _, body = await _read_reply(reader)
            assert status == 400 and b"Bad status line" in body  # aiohttp's answer, at once
            assert not edges
            writer.close()

    asyncio.run(run())


def test_an_idle_connection_is_closed_after_the_keepalive_and_a_used_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keepalive timer is not moved for each request (it looks again when it fires): a
    connection used more often than the keepalive stays, one idle longer goes."""
    monkeypatch.setattr(edge_module, "KEEPALIVE_S", 1.0)

    async def run() -> None:
        routes = _Routes()
        async with _serving(routes) as (port, _edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Used every 0.1 s for twice the keepalive: never idle that long, kept.
            for i in range(20):
                writer.write(_post("/echo", str(i).encode()))
                assert (await _read_reply(reader))[2] == f"edge:{i}".encode()
                await asyncio.sleep(0.1)
            # A request answered after longer than the keepalive is not cut either.
            routes.gate.clear()
            writer.write(_post("/echo", b"slow"))
            await asyncio.sleep(1.5)
            routes.gate.set()
            assert (await _read_reply(reader))[2] == b"edge:slow"
            # Idle from its answer on: closed once the keepalive has passed.
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()

    asyncio.run(run())


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
def test_encoded_bodies_are_decoded_and_answers_compressed_on_the_edge(coding: str) -> None:
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "raw-deflate": -15}[coding]
    packer = zlib.compressobj(wbits=wbits)
    payload = b"tensor " * 1000
    body = packer.compress(payload) + packer.flush()
    name = coding.removeprefix("raw-")

    async def run() -> None:
        async with _serving(_Routes()) as (port, edges):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            extra = f"Content-Encoding: {name}\r\nAccept-Encoding: {name}\r\n"
            writer.write(_post("/echo", body, extra))
            status, headers, answer = await _read_reply(reader)
            assert (status, headers["content-encoding"]) == (200, name)
            # Answers in deflate are zlib's format, whatever the request's was (as aiohttp's).
            unpack = wbits if coding == "gzip" else zlib.MAX_WBITS
            assert zlib.decompress(answer, unpack) == b"edge:" + payload
            assert len(edges) == 1  # the edge served it, and holds the connection
            writer.close()

    asyncio.run(run())


def test_deflate_is_picked_when_both_are_accepted() -> None:
    async def run() -> None:
        async with _serving(_Routes()) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", b"x", "Accept-Encoding: gzip, deflate\r\n"))
            status, headers, answer = await _read_reply(reader)
            assert headers["content-encoding"] == "deflate"
            assert zlib.decompress(answer) == b"edge:x"
            writer.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("encoding", "body", "status", "message"),
    [
        ("gzip", b"not gzip at all", 400, "does not decode as Content-Encoding 'gzip'"),
        ("deflate", zlib.compress(b"x" * 100)[:-6], 400, "Content-Encoding 'deflate'"),
        ("gzip", gzip.compress(b"x" * 5000), 413, "exceeds the limit of 4096 bytes"),
        ("br", b"{}", 400, "unsupported Content-Encoding 'br'"),
    ],
)
def test_a_body_that_does_not_decode_within_the_limit_is_refused(
    encoding: str, body: bytes, status: int, message: str
) -> None:
    """Triton's statuses: 400 for what does not decode (aiohttp's words before), 413 past the
    limit once decoded (a small body that inflates past --http-max-body-bytes)."""

    async def run() -> None:
        async with _serving(_Routes(), max_body=4096) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/echo", body, f"Content-Encoding: {encoding}\r\n"))
            got, headers, answer = await _read_reply(reader)
            assert got == status and message in json.loads(answer)["error"]
            if encoding != "br":  # what follows the body cannot be trusted: closed
                assert headers["connection"] == "close"
                assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
            writer.close()

    asyncio.run(run())


def test_a_long_answer_is_written_after_its_head_without_joining_them() -> None:
    class Transport:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(data)

    body = b"y" * (edge_module.JOIN_BYTES + 1)
    transport = Transport()
    edge_module.write_reply(transport, Reply(200, body, "application/octet-stream"), False)  # type: ignore[arg-type]
    assert len(transport.writes) == 2 and transport.writes[1] is body
    transport.writes.clear()
    edge_module.write_reply(transport, Reply(200, b"small", "text/plain"), False)  # type: ignore[arg-type]
    assert transport.writes == [encode_reply(Reply(200, b"small", "text/plain"), False)]
