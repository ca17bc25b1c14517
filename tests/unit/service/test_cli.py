"""``pbd status``: where it looks for the daemon, and a table that stays one row per version."""

from __future__ import annotations

from pbd.cli import status_url
from pbd.status_line import one_line


def test_status_reads_the_daemons_environment() -> None:
    assert status_url({}) == "127.0.0.1:8001"
    assert status_url({"PBD_GRPC_PORT": "18801"}) == "127.0.0.1:18801"
    assert status_url({"PBD_GRPC_ADDRESS": "10.0.0.5", "PBD_GRPC_PORT": "9"}) == "10.0.0.5:9"
    assert status_url({"PBD_GRPC_ADDRESS": "0.0.0.0"}) == "127.0.0.1:8001"
    assert status_url({"PBD_GRPC_ADDRESS": "unix:/run/pbd/grpc.sock"}) == "unix:/run/pbd/grpc.sock"


def test_multi_line_reasons_keep_one_row() -> None:
    reason = "initialize() failed: ValueError: no\n\nAt:\n  /m/1/model.py(3): initialize\n"
    assert one_line(reason) == "initialize() failed: ValueError: no [...]"
    assert one_line("READY") == "READY"
