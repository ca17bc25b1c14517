"""``pbd status``: where it looks for the daemon, and a table that stays one row per version;
``pbd-tritonserver``'s refusals before anything starts."""

from __future__ import annotations

import sys

import pytest

from pbd.cli import main, status_url, tritonserver_main
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


def test_tritonserver_needs_a_repository_as_triton_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PBD_MODEL_REPOSITORY", raising=False)
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/tritonserver"])
    assert tritonserver_main(["--grpc-port=9000"]) == 2
    # Named as it was called: a container's `tritonserver` link.
    assert capsys.readouterr().err == "tritonserver: --model-repository must be specified\n"


def test_tritonserver_refuses_a_flag_that_would_serve_something_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tritonserver_main(["--model-store=/m", "--model-config-name=h100"]) == 2
    assert "--model-config-name=h100: pbd reads each model's config.pbtxt only" in (
        capsys.readouterr().err
    )


def _never_serves(settings: object, notes: object, prog: str) -> int:
    raise AssertionError(f"{prog} started serving a command line it should refuse")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--load-model=add_sub"],
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
        ),
        (
            ["--model-control-mode=poll", "--load-model", "add_sub"],
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
        ),
        (
            ["--model-control-mode=explicit", "--load-model=*", "--load-model=add_sub"],
            "Wildcard model name '*' must be the ONLY startup model if specified at all.",
        ),
    ],
)
def test_startup_models_tritonserver_refuses_are_refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    """Triton 2.51 prints the same words and exits with 1; pbd's refusals exit with 2."""
    monkeypatch.setattr("pbd.cli._serve", _never_serves)
    for name in ("PBD_MODEL_CONTROL_MODE", "PBD_LOAD_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["tritonserver"])
    assert tritonserver_main(["--model-repository=/m", *argv]) == 2
    assert capsys.readouterr().err == f"tritonserver: {message}\n"
    assert main(["serve", "--model-repository=/m", *argv]) == 2
    assert capsys.readouterr().err == f"pbd: {message}\n"
