"""What HTTP/1.1 itself costs per call in Python: aiohttp against a bare asyncio protocol.

    python -m bench.http1_floor [--connections 8] [--duration 5] [--repeat 2]

Both servers answer ``POST /v2/models/identity/infer`` with the same 211-byte answer (a
KServe v2 binary-data answer: a JSON header and 64 bytes), without a model or a daemon
behind: what is measured is the HTTP server alone. ``aiohttp`` is the web application pbd's
HTTP port runs on (a router, ``handler_cancellation`` as pbd sets it); ``bare`` is an
``asyncio.Protocol`` that splits requests on their blank line and ``Content-Length`` and
writes a fixed answer, the least any HTTP/1.1 edge in Python does (it is a measuring stick,
not a server: no chunked bodies, no limits). h2load (``--h1``, Debian's nghttp2-client) keeps
``--connections`` calls in flight; each server runs in a process of its own, and its CPU per
call comes from ``/proc/<pid>/stat``. Both run in turn in one invocation; medians over
``--repeat``. See bench/README.md, "HTTP/REST (2026-12-06)".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.servers import free_port

PATH = "/v2/models/identity/infer"
ANSWER_JSON = (
    b'{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0",'
    b'"datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}}]}'
)
ANSWER = ANSWER_JSON + bytes(64)
HEADER_LENGTH = str(len(ANSWER_JSON))
SERVERS = ("aiohttp", "bare")


class _Bare(asyncio.Protocol):
    """Requests split on the blank line and Content-Length; each gets the fixed answer."""

    HEAD = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: " + HEADER_LENGTH.encode() + b"\r\n"
        b"Content-Length: " + str(len(ANSWER)).encode() + b"\r\n\r\n"
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(self.HEAD + ANSWER)


async def _serve(kind: str, port: int) -> None:
    if kind == "aiohttp":
        from aiohttp import web

        async def infer(request: web.Request) -> web.Response:
            await request.read()
            headers = {"Inference-Header-Content-Length": HEADER_LENGTH}
            return web.Response(
                body=ANSWER, content_type="application/octet-stream", headers=headers
            )

        app = web.Application()
        app.router.add_post("/v2/models/{model}/infer", infer)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    else:
        await asyncio.get_running_loop().create_server(_Bare, "127.0.0.1", port)
    await asyncio.Event().wait()  # until killed


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, opts: argparse.Namespace, body: Path) -> tuple[float, float]:
    """Calls per second and server CPU µs per call, from one run."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.http1_floor", "--serve", kind, "--port", str(port)]
    )
    try:
        deadline = time.monotonic() + 10
        while not _accepts(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        before = _cpu_s(server.pid)
        run = subprocess.run(
            [
                "h2load", "--h1", f"--clients={opts.connections}",
                f"--duration={opts.duration}", "--warm-up-time=1", f"--data={body}",
                "--header=content-type: application/octet-stream",
                f"http://127.0.0.1:{port}{PATH}",
            ],
            capture_output=True, text=True, timeout=opts.duration + 60, check=True,
        )  # fmt: skip
        spent = _cpu_s(server.pid) - before
    finally:
        server.kill()
        server.wait()
    done = re.search(r"(\d+) succeeded", run.stdout)
    rate = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", run.stdout)
    if done is None or rate is None or int(done.group(1)) == 0:
        raise RuntimeError(f"h2load's output was not understood:\n{run.stdout}")
    return float(rate.group(1)), spent * 1e6 / int(done.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http1_floor", description=__doc__)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--duration", type=int, default=5, help="seconds measured")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.serve:
        asyncio.run(_serve(opts.serve, opts.port))
        return 0
    if shutil.which("h2load") is None:
        print("bench.http1_floor needs h2load: apt-get install nghttp2-client", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pbd-http1-") as tmp:
        body = Path(tmp) / "body"
        body.write_bytes(b'{"inputs":[]}')
        runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in SERVERS}
        for _ in range(opts.repeat):
            for kind in SERVERS:
                runs[kind].append(measure(kind, opts, body))
    print("| server | calls/s | CPU µs/call |")
    print("|---|---:|---:|")
    for kind, got in runs.items():
        rate = statistics.median(r for r, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(f"| {kind} | {rate:.0f} | {cpu:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
