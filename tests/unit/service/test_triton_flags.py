"""tritonserver's command line onto pbd's settings: every flag of Triton 2.51 accepted in its
spellings, each honoured or logged as having no effect, refusals and unknown flags."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pbd.cli import build_tritonserver_parser
from pbd.settings import Settings, from_args
from pbd.triton_flags import (
    FRONTEND_FLAGS,
    FRONTEND_WHY,
    TRITON_FLAGS,
    Note,
    apply_triton_arguments,
    apply_triton_defaults,
    parse_backend_config,
    parse_cache_config,
    pbd_flags,
)

ROOT = Path(__file__).resolve().parents[3]

# `tritonserver --help` of Triton 2.51 (its flags, in its order), and the ones later versions
# added that users of those pass.
TRITON_2_51 = """
help id exit-timeout-secs log-verbose log-info log-warning log-error log-format log-file
model-store model-repository exit-on-error disable-auto-complete-config strict-readiness
model-control-mode repository-poll-secs load-model model-config-name model-load-thread-count
model-load-retry-count model-namespacing enable-peer-access allow-http http-address http-port
reuse-http-port http-header-forward-pattern http-thread-count http-restricted-api allow-grpc
grpc-address grpc-port reuse-grpc-port grpc-header-forward-pattern
grpc-infer-allocation-pool-size grpc-use-ssl grpc-use-ssl-mutual grpc-server-cert
grpc-server-key grpc-root-cert grpc-infer-response-compression-level grpc-keepalive-time
grpc-keepalive-timeout grpc-keepalive-permit-without-calls grpc-http2-max-pings-without-data
grpc-http2-min-recv-ping-interval-without-data grpc-http2-max-ping-strikes
grpc-max-connection-age grpc-max-connection-age-grace grpc-restricted-protocol allow-sagemaker
sagemaker-port sagemaker-safe-port-range sagemaker-thread-count allow-vertex-ai vertex-ai-port
vertex-ai-thread-count vertex-ai-default-model allow-metrics allow-gpu-metrics allow-cpu-metrics
metrics-address metrics-port metrics-interval-ms metrics-config trace-config backend-directory
backend-config repoagent-directory cache-config cache-directory rate-limit rate-limit-resource
pinned-memory-pool-byte-size cuda-memory-pool-byte-size cuda-virtual-address-size
min-supported-compute-capability buffer-manager-thread-count host-policy model-load-gpu-limit
strict-model-config response-cache-byte-size trace-file trace-level trace-rate trace-count
trace-log-frequency
""".split()  # noqa: SIM905 - as --help lists them, easier to compare by eye
LATER = ["grpc-infer-thread-count", "grpc-max-response-pool-size", "http-max-input-size",
         "allow-client-shm"]  # fmt: skip

# A value Triton accepts for each flag that takes one (the rest take a number).
VALUES = {
    "bool": "true",
    "model-store": "/m",
    "model-repository": "/m",
    "model-control-mode": "explicit",
    "load-model": "a",
    "log-format": "ISO8601",
    "log-file": "",
    "trace-config": "rate=10",
    "trace-level": "TIMESTAMPS",
    "metrics-config": "summary_latencies=false",
    "backend-config": "python,shm-default-byte-size=2097152",
    "cache-config": "local,size=1048576",
    "cuda-memory-pool-byte-size": "0:1024",
    "grpc-restricted-protocol": "health:k=v",
    "http-restricted-api": "health:k=v",
    "rate-limit": "off",
    "grpc-infer-response-compression-level": "none",
}
REFUSED = {"model-config-name"}
# What a flag needs beside it to be accepted (as Triton needs it too).
WITH = {"load-model": ["--model-control-mode=explicit"]}
SKIP = {"help", "grpc-use-ssl", "grpc-use-ssl-mutual"}  # TLS needs files; covered elsewhere


def _parse(argv: list[str], environ: dict[str, str] | None = None) -> tuple[Settings, list[Note]]:
    args = build_tritonserver_parser().parse_args(argv)
    notes = apply_triton_arguments(args)
    apply_triton_defaults(args, environ or {})
    return from_args(args, environ or {}), notes


def _value(flag: str, kind: str) -> str:
    if flag in VALUES:
        return VALUES[flag]
    if kind == "bool":
        return "false"
    if kind in ("float", "int"):
        return "1"
    return "x"


def _kinds() -> dict[str, str]:
    """Flag -> the type of value it takes ("bool", "int", "float" or anything else)."""
    kinds = {f.name: f.type for f in TRITON_FLAGS}
    for field in dataclasses.fields(Settings):
        kinds.setdefault(field.name.replace("_", "-"), str(field.type))
    return kinds


def test_every_triton_flag_is_known() -> None:
    known = pbd_flags() | {f.name for f in TRITON_FLAGS} | {"help"}
    assert set(TRITON_2_51) - known == set()
    assert set(LATER) - known == set()


def test_the_table_matches_the_installed_tritonserver() -> None:
    """With Triton 2.51 at .triton (scripts/triton.sh), its own --help lists the same flags."""
    binary = ROOT / ".triton" / "tritonserver"
    if not binary.exists() or shutil.which("sh") is None:
        pytest.skip("Triton is not installed here (scripts/triton.sh installs it)")
    done = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    text = done.stdout + done.stderr
    listed = [line.split()[0][2:] for line in text.splitlines() if line.startswith("  --")]
    assert listed == TRITON_2_51


@pytest.mark.parametrize("flag", [f for f in TRITON_2_51 + LATER if f not in SKIP])
def test_each_flag_in_both_spellings(flag: str) -> None:
    kind = _kinds()[flag]
    value = _value(flag, kind)
    for spelled in ([f"--{flag}={value}"], [f"--{flag}", value]):
        argv = [*spelled, *WITH.get(flag, [])]
        if flag in REFUSED:
            with pytest.raises(ValueError, match=f"--{flag}="):
                _parse(argv)
            continue
        settings, notes = _parse(argv)
        assert isinstance(settings, Settings)
        assert all(f"--{flag}=" in line for _, line in notes), notes


@pytest.mark.parametrize("spelling", ["true", "TRUE", "True", "on", "1", "yes"])
def test_triton_boolean_spellings(spelling: str) -> None:
    settings, _ = _parse([f"--allow-grpc={spelling}", "--strict-readiness", "0"])
    assert settings.allow_grpc is True and settings.strict_readiness is False


def test_a_bad_boolean_is_refused_with_tritons_words(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["--model-namespacing=maybe"])
    assert "invalid value for bool option: maybe" in capsys.readouterr().err


def test_unknown_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(["--model-store=/m", "--no-such-flag=1"])
    assert info.value.code == 2
    assert "unrecognized arguments: --no-such-flag=1" in capsys.readouterr().err


def test_one_repository_under_either_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(["--model-store=/m"])[0].model_repository == Path("/m")
    with pytest.raises(SystemExit):
        _parse(["--model-store=/a", "--model-repository=/b"])
    assert "given twice (/a, /b); pbd serves one model repository" in capsys.readouterr().err


def test_translations_onto_settings() -> None:
    settings, notes = _parse(
        [
            "--id=edge-7",
            "--strict-model-config=true",
            "--trace-level=TIMESTAMPS",
            "--trace-rate=10",
            "--trace-count=5",
            "--trace-log-frequency=2",
            "--metrics-config=counter_latencies=false",
            "--http-max-input-size=1024",
        ]
    )
    assert settings.server_id == "edge-7"
    assert settings.disable_auto_complete_config is True
    assert settings.trace_config == ["level=TIMESTAMPS", "rate=10", "count=5", "log-frequency=2"]
    assert settings.metrics_counter_latencies is False
    assert settings.http_max_body_bytes == 1024
    assert notes == []
    assert _parse(["--strict-model-config=false"])[0].disable_auto_complete_config is False


def test_metrics_config_as_triton_reads_it() -> None:
    _, notes = _parse(["--metrics-config=summary_latencies=true", "--metrics-config=foo=1"])
    assert [level for level, _ in notes] == [logging.WARNING, logging.WARNING]
    assert "pbd exports no latency summaries" in notes[0][1]
    with pytest.raises(ValueError, match="--metrics-config option format is <setting>=<value>"):
        _parse(["--metrics-config=counter_latencies"])


def test_metrics_config_histogram_latencies_serves_the_first_response_histogram() -> None:
    """Triton turns its latency histograms on for "true" only (any other value: off)."""
    assert _parse([])[0].metrics_histogram_latencies is False
    settings, notes = _parse(["--metrics-config=histogram_latencies=true"])
    assert settings.metrics_histogram_latencies is True and notes == []
    for text in ("false", "TRUE", "1"):
        settings, notes = _parse([f"--metrics-config=histogram_latencies={text}"])
        assert settings.metrics_histogram_latencies is False and notes == []


def test_cache_config_local_size_is_the_response_cache() -> None:
    assert _parse([])[0].cache_local_size_bytes == 0
    settings, notes = _parse(["--cache-config=local,size=1048576"])
    assert settings.cache_local_size_bytes == 1048576 and notes == []
    # The last size counts; the local cache's other settings and other caches change nothing.
    settings, notes = _parse(
        [
            "--cache-config", "local,size=4096",
            "--cache-config", "local,size=8192",
            "--cache-config", "local,foo=1",
            "--cache-config", "redis,host=localhost",
            "--cache-directory", "/opt/tritonserver/caches",
        ]
    )  # fmt: skip
    assert settings.cache_local_size_bytes == 8192
    assert [level for level, _ in notes] == [logging.INFO, logging.WARNING, logging.INFO]
    assert notes[1][1].startswith("--cache-config=redis,host=localhost has no effect in pbd")
    settings, notes = _parse(["--cache-config=redis,host=localhost"])
    assert settings.cache_local_size_bytes == 0 and len(notes) == 1


def test_response_cache_byte_size_is_tritons_deprecated_cache_config() -> None:
    settings, notes = _parse(["--response-cache-byte-size=4096"])
    assert settings.cache_local_size_bytes == 4096
    assert notes == [
        (logging.WARNING, "--response-cache-byte-size=4096 is deprecated (as in Triton): it is "
                          "--cache-config=local,size=4096"),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="Incompatible flags --response-cache-byte-size and "
                                         "--cache-config both provided"):  # fmt: skip
        _parse(["--response-cache-byte-size=4096", "--cache-config=local,size=4096"])


def test_an_explicit_pbd_flag_wins_over_the_cache_flags() -> None:
    for flag in ("--cache-config=local,size=4096", "--response-cache-byte-size=4096"):
        settings, _ = _parse(["--cache-local-size-bytes=100", flag])
        assert settings.cache_local_size_bytes == 100


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("local", "No cache specified. --cache-config option format is <cache name>,"),
        (",size=1", "No cache specified."),
        ("local,size", "--cache-config option format is '<cache name>,<setting>=<value>'"),
        ("local,size=", "--cache-config option format is"),
        ("local,foo=1", "Failed to initialize LocalCache: config didn't contain a valid 'size'"),
        ("local,size=abc", "the local cache's size is a number of bytes"),
        ("local,size=0", "a local cache of 0 bytes cannot hold anything"),
    ],
)
def test_cache_config_errors(value: str, message: str) -> None:
    """Triton 2.51 refuses each of these too (the format at parsing, the size at start)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        _parse([f"--cache-config={value}"])
    if value == "local,size=0":
        with pytest.raises(ValueError, match="cannot hold anything"):
            _parse(["--response-cache-byte-size=0"])


def test_cache_config_parsing() -> None:
    assert parse_cache_config("local,size=1") == ("local", "size", "1")
    assert parse_cache_config("redis,host=a,b") == ("redis", "host", "a,b")


def test_backend_config_the_python_backends_settings() -> None:
    settings, notes = _parse(
        [
            "--backend-config=python,shm-default-byte-size=2097152",
            "--backend-config=shm-default-byte-size=1048576",  # global: python's own win
            "--backend-config=shm-growth-byte-size=8388608",
            "--backend-config=python,stub-timeout-seconds=7",
            "--backend-config=python,shm-region-prefix-name=edge",
            "--backend-config=vllm,enable-metrics=true",
            "--backend-config=python,thread-pool-size=4",
        ]
    )
    assert settings.shm_default_byte_size == 2097152
    assert settings.shm_growth_byte_size == 8388608
    assert settings.worker_start_timeout_secs == 7
    assert settings.shm_prefix == "edge"
    lines = [line for _, line in notes]
    vllm = "--backend-config=vllm,enable-metrics=true has no effect"
    assert any(line.startswith(vllm) for line in lines)
    assert any("thread-pool-size=4 has no effect" for line in lines)


def test_an_explicit_pbd_flag_wins_over_backend_config() -> None:
    settings, _ = _parse(
        ["--shm-default-byte-size=65536", "--backend-config=python,shm-default-byte-size=2097152"]
    )
    assert settings.shm_default_byte_size == 65536


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (",x=1", "No backend specified."),
        ("python,x", "--backend-config option format is '<backend name>,<setting>=<value>'"),
        ("python,shm-growth-byte-size=0", "shm-growth-byte-size can't be smaller than or equal"),
    ],
)
def test_backend_config_errors(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _parse([f"--backend-config={value}"])


def test_backend_config_parsing() -> None:
    assert parse_backend_config("python,a=b") == ("python", "a", "b")
    assert parse_backend_config("a=b,c") == ("", "a", "b,c")  # a comma inside the value


def test_no_effect_levels() -> None:
    _, notes = _parse(["--allow-sagemaker=false", "--allow-sagemaker=true", "--rate-limit=off"])
    # The last value counts (as in Triton): allow-sagemaker=true asks for what pbd lacks.
    assert notes == [
        (logging.WARNING, "--allow-sagemaker=true has no effect in pbd: pbd serves the KServe v2 "
                          "protocol only (no SageMaker endpoints)"),
        (logging.INFO, "--rate-limit=off has no effect in pbd: pbd has no rate limiter: an "
                       "instance takes work once it is free"),
    ]  # fmt: skip


def test_front_end_flags_say_what_pbd_does_instead() -> None:
    argv = [f"--{flag}={'2' if flag.endswith('count') else 'true'}" for flag in FRONTEND_FLAGS]
    _, notes = _parse(argv)
    assert len(notes) == len(FRONTEND_FLAGS)
    assert all(line.endswith(FRONTEND_WHY) for _, line in notes)


def test_tritons_defaults_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    settings, _ = _parse(["--model-store=/m"])
    assert (settings.grpc_address, settings.http_address) == ("0.0.0.0", "0.0.0.0")
    assert settings.metrics_address == "0.0.0.0" and settings.exit_on_error is True
    settings, _ = _parse(["--http-address=10.1.2.3"], {"PBD_GRPC_ADDRESS": "127.0.0.1"})
    assert settings.metrics_address == "10.1.2.3"  # Triton's: the HTTP address
    assert settings.grpc_address == "127.0.0.1"  # a PBD_* variable beats Triton's default
    settings, _ = _parse(["--grpc-address=::1"], {"PBD_GRPC_ADDRESS": "127.0.0.1"})
    assert settings.grpc_address == "::1"  # and the flag beats the variable


def test_pbd_serve_keeps_its_own_defaults_and_takes_tritons_flags() -> None:
    from pbd.cli import build_parser

    args = build_parser().parse_args(["serve", "--model-store=/m", "--reuse-grpc-port=true"])
    notes = apply_triton_arguments(args)
    settings = from_args(args, {})
    assert settings.model_repository == Path("/m") and settings.grpc_address == "127.0.0.1"
    assert [level for level, _ in notes] == [logging.WARNING]


def test_the_triton_only_flags_take_values_their_type_checks() -> None:
    with pytest.raises(SystemExit):
        build_tritonserver_parser().parse_args(["--model-load-thread-count=many"])
    parsed = build_tritonserver_parser().parse_args(["--metrics-interval-ms=2000.5"])
    assert isinstance(parsed, argparse.Namespace)


def test_docs_triton_compat_lists_every_flag_once() -> None:
    text = (ROOT / "docs" / "triton-compat.md").read_text()
    table = text[text.index("## Every flag") : text.index("### Front ends")]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `--")]
    listed = [flag for row in rows for flag in re.findall(r"`--([a-z0-9-]+)`", row)]
    assert sorted(listed) == sorted(f for f in TRITON_2_51 + LATER if f != "help")
