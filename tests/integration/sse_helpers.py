"""HTTP clients for the generate and OpenAI tests: aiohttp (each answer read whole, or an event
stream read event by event) and curl, as users call these endpoints; a daemon serving the
LLM-shaped test models; and the metric helpers those tests read."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from pbd_harness import EXAMPLE_MODELS, TEST_MODELS, make_repository, wait_until

LLM_MODELS = {
    "tiny_llm": EXAMPLE_MODELS / "tiny_llm",
    "generate_probe": TEST_MODELS / "generate_probe",
    "generate_probe_sync": TEST_MODELS / "generate_probe_sync",
    "identity_fp32": EXAMPLE_MODELS / "identity_fp32",
}
TIMEOUT_S = 60.0


def llm_repository(root: Path) -> Path:
    return make_repository(root, LLM_MODELS)


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    @property
    def events(self) -> list[str]:
        """The ``data`` of each server-sent event, in order."""
        return events_of(self.body)

    def json(self) -> Any:
        return json.loads(self.body)


def events_of(body: bytes) -> list[str]:
    """Server-sent events as the HTML spec reads them: events end at a blank line; the
    ``data:`` lines of one event are joined with newlines."""
    events = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        lines = [
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        ]
        if lines:
            events.append("\n".join(lines))
    return events


async def _post(url: str, body: bytes, headers: dict[str, str] | None) -> Answer:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=True) as session,
        session.post(url, data=body, headers=headers or {}) as response,
    ):
        return Answer(
            response.status, response.headers.get("Content-Type", ""), await response.read()
        )


def post(url: str, body: str | bytes, headers: dict[str, str] | None = None) -> Answer:
    raw = body.encode() if isinstance(body, str) else body
    return asyncio.run(_post(url, raw, headers))


async def first_events_then_leave(url: str, body: str, count: int) -> list[str]:
    """Read ``count`` events of a stream, then close the connection (a client that goes away)."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    got: list[str] = []
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, data=body.encode()) as response,
    ):
        assert response.status == 200, await response.text()
        buffer = b""
        async for chunk in response.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                got.extend(events_of(block + b"\n\n"))
            if len(got) >= count:
                response.close()  # drops the connection
                break
    return got


def curl(url: str, body: str) -> Answer:
    """``curl -sN -i -X POST -d <body>``, as the README shows."""
    out = subprocess.run(
        ["curl", "-sN", "-i", "-X", "POST", url, "-d", body],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=True,
    ).stdout
    head, _, rest = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    found = re.search(rb"(?im)^content-type:\s*(.+?)\r?$", head)
    return Answer(status, found.group(1).decode() if found else "", rest)


def send_request(address: str, path: str, body: str) -> socket.socket:
    """A raw connection to ``host:port`` that sent a POST and reads nothing yet (a small
    receive buffer); closing it is a client going away."""
    host, port = address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body.encode())
    return sock


def metric(metrics_url: str, name: str, labels: str = "") -> float | None:
    """The value of one sample on ``/metrics`` (``labels``: its label text), None if absent."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)"
    found = re.search(rf"(?m)^{pattern}$", text)
    return float(found.group(1)) if found else None


def wait_for_metric(metrics_url: str, name: str, at_least: float, labels: str = "") -> float:
    def reached() -> float | None:
        value = metric(metrics_url, name, labels)
        return value if value is not None and value >= at_least else None

    value: float = wait_until(reached, TIMEOUT_S, f"{name} to reach {at_least}")
    return value
