from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pbd.settings import Settings, add_arguments, from_args, parse_bool


def _parse(argv, environ=None):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv), environ or {})


def test_defaults_work_without_flags():
    s = _parse([])
    assert s == Settings()
    assert s.grpc_address == "127.0.0.1" and s.grpc_port == 8001


def test_flag_beats_environment_beats_default():
    s = _parse(["--grpc-port", "9000"], {"PBD_GRPC_PORT": "7000", "PBD_LOG_VERBOSE": "2"})
    assert s.grpc_port == 9000 and s.log_verbose == 2


def test_triton_style_flags():
    s = _parse(
        [
            "--model-repository",
            "/m",
            "--model-control-mode",
            "explicit",
            "--load-model",
            "a",
            "--load-model",
            "b",
            "--strict-readiness",
            "false",
        ]
    )
    assert s.model_repository == Path("/m")
    assert s.load_model == ["a", "b"] and s.strict_readiness is False


def test_env_lists_and_bad_values():
    explicit = {"PBD_MODEL_CONTROL_MODE": "explicit"}
    assert _parse([], {"PBD_LOAD_MODEL": "x,y", **explicit}).load_model == ["x", "y"]
    with pytest.raises(ValueError):
        _parse([], {"PBD_MODEL_CONTROL_MODE": "sometimes"})
    with pytest.raises(argparse.ArgumentTypeError):
        parse_bool("maybe")


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_startup_models_need_explicit_mode(mode: str) -> None:
    """As tritonserver: other modes load every model, so naming some is a mistake."""
    with pytest.raises(ValueError, match=r"^Use of '--load-model' requires setting "):
        _parse(["--model-control-mode", mode, "--load-model", "a"])
    with pytest.raises(ValueError, match="requires setting '--model-control-mode=explicit'"):
        _parse([], {"PBD_LOAD_MODEL": "a"})


def test_the_wildcard_stands_alone() -> None:
    explicit = ["--model-control-mode", "explicit"]
    for models in (["*", "a"], ["a", "*"]):
        argv = [*explicit, *(arg for m in models for arg in ("--load-model", m))]
        with pytest.raises(ValueError, match=r"^Wildcard model name '\*' must be the ONLY "):
            _parse(argv)
    assert _parse([*explicit, "--load-model", "*", "--load-model", "*"]).load_model == ["*", "*"]


def test_bad_restriction_rules_are_refused_before_the_start() -> None:
    with pytest.raises(ValueError, match="--http-restricted-api 'nope:k=v': unknown group"):
        _parse(["--http-restricted-api", "nope:k=v"])
    with pytest.raises(ValueError, match="--grpc-restricted-protocol 'health': expected"):
        _parse([], {"PBD_GRPC_RESTRICTED_PROTOCOL": "health"})
    assert _parse(["--http-restricted-api", "health:k=v"]).http_restricted_api == ["health:k=v"]


def test_every_field_has_help():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for name in Settings.field_names():
        assert "--" + name.replace("_", "-") in text
        assert "PBD_" + name.upper() in text


@pytest.mark.parametrize(
    ("cpus", "expected"), [(1, 1), (2, 2), (7, 2), (11, 2), (12, 3), (16, 4), (64, 8)]
)
def test_the_default_front_end_count_follows_the_usable_cpus(
    monkeypatch: pytest.MonkeyPatch, cpus: int, expected: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    assert Settings().front_count() == expected
    assert Settings(frontends=3).front_count() == 3  # given: kept, whatever the CPUs
