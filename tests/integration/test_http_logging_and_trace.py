"""The logging and trace extensions over HTTP, with ``tritonclient.http`` and raw requests.

Expected answers are Triton 2.51's (checked against it with the same requests, in
OpenTelemetry trace mode): the gRPC RPCs and these routes change the same settings.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from pbd_harness import (
    DEFAULT_LOG_SETTINGS,
    TEST_MODELS,
    Daemon,
    make_repository,
    running_daemon,
    wait_until,
)

NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NON_STRING = "attempt to access JSON non-string as string"
NON_ARRAY = "attempt to access JSON non-array as array"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("http_extensions")
    repository = make_repository(workdir, {"traced": TEST_MODELS / "traced"})
    with running_daemon(
        repository, workdir, settle=["traced"], env={"OTEL_TRACES_EXPORTER": "none"}
    ) as daemon:
        yield daemon


@pytest.fixture
def http(daemon: Daemon) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(daemon.http_url)
    yield client
    # Each test starts from the defaults (these are the daemon's own settings).
    client.update_log_settings({"log_info": True, "log_verbose_level": 0, "log_warning": True})
    for model in ("", "traced"):
        clear = {"trace_level": None, "trace_rate": None, "trace_count": None}
        _request(daemon, "POST", f"/v2{'/models/' + model if model else ''}/trace/setting", clear)
    client.close()


def _request(daemon: Daemon, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{daemon.http_url}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _infer(http: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, dtype=np.float32))
    http.infer("traced", [tensor])


def test_log_settings_over_http_reach_running_workers(
    daemon: Daemon, http: httpclient.InferenceServerClient
) -> None:
    """Was 503 "the server does not support dynamic logging"."""
    assert http.get_log_settings() == DEFAULT_LOG_SETTINGS
    before = daemon.log().count("traced: info line"), daemon.log().count("traced: verbose line")
    _infer(http)
    wait_until(
        lambda: daemon.log().count("traced: info line") == before[0] + 1, 30, "the info line"
    )
    assert daemon.log().count("traced: verbose line") == before[1]  # verbose level 0
    answer = http.update_log_settings({"log_verbose_level": 1, "log_info": False})
    assert answer == {**DEFAULT_LOG_SETTINGS, "log_verbose_level": 1, "log_info": False}
    _infer(http)
    wait_until(
        lambda: daemon.log().count("traced: verbose line") == before[1] + 1, 30, "the verbose line"
    )
    assert daemon.log().count("traced: info line") == before[0] + 1  # log_info off
    grpc_view = daemon.client().get_log_settings(as_json=True)["settings"]
    assert grpc_view["log_info"] == {"bool_param": False}  # one settings object for both


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"log_verbose_level": -1}, 500, NON_UINT),
        ({"log_verbose_level": "2"}, 500, NON_UINT),
        ({"log_info": "no"}, 500, "attempt to access JSON non-boolean as boolean"),
        ({"log_format": 3}, 500, NON_STRING),
        ({"log_file": ""}, 501, "log file location can not be updated through network protocol"),
        ({"log_format": "fancy"}, 503, "invalid argument for --log_format, got: fancy"),
    ],
)  # fmt: skip
def test_log_settings_errors_as_triton(
    daemon: Daemon, http: httpclient.InferenceServerClient, body: Any, status: int, message: str
) -> None:
    assert _request(daemon, "POST", "/v2/logging", body) == (status, {"error": message})
    assert http.get_log_settings() == DEFAULT_LOG_SETTINGS


def test_log_settings_as_triton_reads_them(
    daemon: Daemon, http: httpclient.InferenceServerClient
) -> None:
    ignored = [{"unknown": 1}, {"log_verbose_level": None}, [1]]
    for body in ignored:
        assert _request(daemon, "POST", "/v2/logging", body) == (200, DEFAULT_LOG_SETTINGS)
    # Keys before the bad one are applied, in Triton's order (not the body's).
    body = {"log_format": "fancy", "log_info": False}
    assert _request(daemon, "POST", "/v2/logging", body)[0] == 503
    assert http.get_log_settings()["log_info"] is False
    # Triton keeps the level in 32 bits.
    assert http.update_log_settings({"log_verbose_level": 2**32 + 2})["log_verbose_level"] == 2
    status, answer = _request(daemon, "POST", "/v2/logging", b"not json")
    assert status == 500 and answer["error"].startswith("failed to parse the request JSON buffer")


def test_trace_settings_over_http(daemon: Daemon, http: httpclient.InferenceServerClient) -> None:
    """Was 503 "the server does not support trace"; a single value is a string here."""
    initial = {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
    }
    assert http.get_trace_settings() == initial
    model = http.update_trace_settings("traced", {"trace_rate": "5", "trace_level": ["TENSORS"]})
    assert model == {**initial, "trace_rate": "5", "trace_level": ["TENSORS"]}
    assert http.update_trace_settings(settings={"trace_rate": "10"})["trace_rate"] == "10"
    assert http.get_trace_settings("traced")["trace_rate"] == "5"
    cleared = http.update_trace_settings("traced", {"trace_rate": None, "trace_level": None})
    assert cleared == {**initial, "trace_rate": "10"}
    grpc_view = daemon.client().get_trace_settings(as_json=True)["settings"]
    assert grpc_view["trace_rate"] == {"value": ["10"]}  # one settings object for both
    assert _request(daemon, "POST", "/v2/trace/setting", {"unknown": "x"})[0] == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v2/trace/setting", {"trace_rate": 5}, 500, NON_STRING),
        ("/v2/trace/setting", {"trace_rate": ["6"]}, 500, NON_STRING),
        ("/v2/trace/setting", {"trace_level": "TENSORS"}, 500, NON_ARRAY),
        ("/v2/trace/setting", {"trace_level": [1]}, 500, NON_STRING),
        ("/v2/trace/setting", {"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
        ("/v2/trace/setting", {"trace_level": ["OFF", "TIMESTAMPS"]}, 400,
         "Expect only one trace level 'OFF' is specified"),
        ("/v2/trace/setting", {"trace_file": "x"}, 501,
         "trace file location can not be updated through network protocol"),
        ("/v2/models/nope/trace/setting", {}, 400, "Request for unknown model : nope"),
    ],
)  # fmt: skip
def test_trace_settings_errors_as_triton(
    daemon: Daemon, path: str, body: Any, status: int, message: str
) -> None:
    assert _request(daemon, "POST", path, body) == (status, {"error": message})


def test_no_trace_setting_per_version(daemon: Daemon) -> None:
    status, _ = _request(daemon, "GET", "/v2/models/traced/versions/1/trace/setting")
    assert status == 404  # as Triton: the extension has no version in its path
