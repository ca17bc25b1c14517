"""bench.attacks, bench.floods and bench.h2_engines on the echo server's pbd front end: each
flood is well-formed enough to be answered as the issue describes, and the reports add up.
No wall-clock thresholds."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import attacks, h2_engines
from bench.floods import Window, legitimate, table
from bench.servers import ServerProcess, start_echo


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_echo(sys.executable, tmp_path_factory.mktemp("floods"), front_end="pbd")
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.mark.parametrize(
    "flood, reason",
    [
        ("PING", "too_many_pings"),
        ("rapid reset + DATA", "too many streams reset"),
        ("empty DATA", "empty frames"),
        ("SETTINGS", "too many SETTINGS frames"),
    ],
)
def test_each_flood_meets_its_budget(echo: ServerProcess, flood: str, reason: str) -> None:
    met = attacks.flood(flood, "127.0.0.1", echo.port, 0.5)
    goaways = met["goaways"]
    assert isinstance(goaways, dict) and goaways, met
    assert all(key.startswith("11:") and reason[:20] in key for key in goaways), met
    assert isinstance(met["connections"], int) and met["connections"] >= 1


def test_the_legitimate_client_counts_its_calls(echo: ServerProcess) -> None:
    window = Window("echo", "none")
    asyncio.run(legitimate(echo.target, 0.3, window))
    assert window.calls >= 10 and window.errors == 0 and window.p99_ms >= window.p50_ms > 0
    text = table([window], ["echo"])
    assert "| none |" in text and f"0/{window.calls}" in text


def test_idle_connections_are_held_and_counted(echo: ServerProcess) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-m", "bench.attacks", "idle", echo.target, "20", "--raw"],
        cwd=Path(__file__).resolve().parents[2],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert json.loads(holder.stdout.readline()) == {"open": 20}
    holder.stdin.close()
    assert json.loads(holder.stdout.readline()) == {"closed_by_server": 0}
    assert holder.wait(timeout=30) == 0
    holder.stdout.close()


def test_h2_engines_reports_pbd_and_nghttp2_when_present(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert h2_engines.main(["--requests", "300"]) == 0
    out = capsys.readouterr().out
    assert "pbd.h2 core" in out
    assert ("libnghttp2 (ctypes)" in out) == (h2_engines._library() is not None)
