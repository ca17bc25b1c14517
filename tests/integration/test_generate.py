"""The generate extension on the real daemon, called with aiohttp and curl: the JSON mapping, the
event stream, errors and their statuses, the empty final response, a model that is not
decoupled, cancellation when the client goes away, the bound on a slow reader, statistics
and the first-response histogram. (Side by side with Triton: test_generate_vs_triton.py.)"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from pbd_harness import Daemon, rss_anon_bytes, running_daemon, wait_until
from sse_helpers import (
    LLM_MODELS,
    curl,
    first_events_then_leave,
    llm_repository,
    metric,
    post,
    send_request,
    wait_for_metric,
)

SSE = "text/event-stream; charset=utf-8"
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
BUFFER_BYTES = 1 << 20


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("generate")
    repository = llm_repository(workdir)
    with running_daemon(
        repository,
        workdir,
        "--metrics-histogram-latencies",
        "true",
        "--http-stream-buffer-bytes",
        str(BUFFER_BYTES),
        settle=list(LLM_MODELS),
    ) as running:
        yield running


def url(daemon: Daemon, model: str, kind: str = "generate") -> str:
    return f"http://{daemon.http_url}/v2/models/{model}/{kind}"


# -- the JSON mapping ------------------------------------------------------------------------


def test_generate_maps_scalars_arrays_bytes_and_parameters(daemon: Daemon) -> None:
    body = {
        "text_input": "hi",
        "INTS": [1, 2, 3],
        "FP": 1.5,
        "FLAG": True,
        "WORDS": ["a", "b"],
        "GRID": [1, 2, 3, 4],
        "parameters": {"x": 1, "y": "s", "z": 2.5, "w": False},
        "id": "abc",
        "extra": 5,
    }
    answer = post(url(daemon, "generate_probe"), json.dumps(body))
    assert (answer.status, answer.content_type) == (200, "application/json")
    expected = {
        "FLAG_OUT": True,
        "FP_OUT": 1.5,
        "GRID_OUT": [1, 2, 3, 4],  # a [2, 2] output, flat
        "INTS_OUT": [1, 2, 3],
        "PARAMS": json.dumps(
            {"extra": 5, "id": "abc", "w": False, "x": 1, "y": "s", "z": 2.5}, sort_keys=True
        ),
        "WORDS_OUT": ["a", "b"],
        "id": "abc",
        "model_name": "generate_probe",
        "model_version": "1",
        "text_output": "hi",
    }
    # Keys sorted, compact, as Triton writes it.
    assert answer.body == json.dumps(expected, separators=(",", ":")).encode()


def test_a_versioned_url_and_a_batching_model(daemon: Daemon) -> None:
    base = f"http://{daemon.http_url}/v2/models/generate_probe_sync/versions/1/generate"
    answer = post(base, '{"text_input": ["a", "b"]}')  # shape [2, 1]: a batch of 2
    assert answer.json() == {
        "model_name": "generate_probe_sync",
        "model_version": "1",
        "text_output": ["A", "B"],
    }
    answer = post(base, '{"text_input": "a", "INTS": [1, 2]}')  # [1, 1] and [1, 2]
    assert answer.json()["INTS_OUT"] == [2, 3]


def test_control_parameters_keep_their_meaning_as_on_infer(daemon: Daemon) -> None:
    """priority is the request's priority, not a parameter the model sees; triton_* keys are
    refused. (Triton 2.51 passes both to the model as plain parameters.)"""
    answer = post(url(daemon, "generate_probe"), '{"text_input": "x", "priority": 3, "k": 1}')
    assert answer.json()["PARAMS"] == '{"k": 1}'
    refused = post(url(daemon, "generate_probe"), '{"text_input": "x", "triton_x": 1}')
    assert refused.status == 400 and "reserved for Triton usage" in refused.json()["error"]


def test_compressed_bodies_both_ways(daemon: Daemon) -> None:
    """Triton 2.51 refuses a compressed generate request; pbd takes it as it does for infer."""
    body = gzip.compress(b'{"text_input": "zip"}')
    request = urllib.request.Request(
        url(daemon, "generate_probe"),
        data=body,
        headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        doc = json.loads(gzip.decompress(response.read()))
    assert doc["text_output"] == "zip"


# -- one answer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [
        ("three", 500, ONE_RESPONSE),  # Triton 2.51: status 200 with this error
        ("none", 500, ONE_RESPONSE),
        ("error_first", 500, "first failed"),  # Triton 2.51: 400 whatever the code
        ("error_mid", 500, "then failed"),  # Triton 2.51: 200, the "exactly 1" error
    ],
)
def test_generate_answers_one_response_or_an_error(
    daemon: Daemon, mode: str, status: int, error: str
) -> None:
    answer = post(url(daemon, "generate_probe"), json.dumps({"text_input": "x", "MODE": mode}))
    assert (answer.status, answer.json()) == (status, {"error": error})


def test_generate_of_a_decoupled_model_with_one_response(daemon: Daemon) -> None:
    for mode in ("one", "one_final"):  # the final flag alone after it, or on it
        body = json.dumps({"text_input": "x", "MODE": mode})
        assert post(url(daemon, "generate_probe"), body).json()["text_output"] == "x"


def test_an_exception_in_execute_is_the_models_error(daemon: Daemon) -> None:
    answer = post(url(daemon, "generate_probe"), '{"text_input": "x", "MODE": "raise"}')
    assert answer.status == 500
    assert "execute failed on purpose" in answer.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        ("nosuch", '{"text_input": "x"}', 404, "Request for unknown model: 'nosuch' is not found"),
        ("generate_probe/versions/2", '{"text_input": "x"}', 404, "version 2 is not found"),
        ("generate_probe", '{"text_input": "x"', 400, "failed to parse the request JSON"),
        ("generate_probe", "", 400, "failed to parse the request JSON"),
        ("generate_probe", "[1]", 400, "the request JSON must be an object"),
        ("generate_probe", "{}", 400, "missing required input(s) ['text_input']"),
        ("generate_probe", '{"text_input": 5}', 400, "BYTES elements must be JSON strings"),
        ("generate_probe", '{"text_input": "x", "FP": [1, 2]}', 400, "can not convert input"),
        ("generate_probe", '{"text_input": "x", "e": null}', 400, "parameter 'e' has invalid"),
    ],
)
@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_errors_before_the_model_runs_are_json(
    daemon: Daemon, kind: str, path: str, body: str, status: int, error: str
) -> None:
    """On either endpoint, as Triton: a request refused before it runs is a JSON error."""
    answer = post(url(daemon, path, kind), body)
    assert answer.status == status
    assert answer.content_type.startswith("application/json")
    assert error in answer.json()["error"]


def test_only_post(daemon: Daemon) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url(daemon, "generate_probe"), timeout=10)
    refused.value.close()
    assert refused.value.code == 405


# -- the event stream ------------------------------------------------------------------------


def test_each_response_is_an_event(daemon: Daemon) -> None:
    answer = post(
        url(daemon, "generate_probe", "generate_stream"), '{"text_input": "t", "MODE": "three"}'
    )
    assert (answer.status, answer.content_type) == (200, SSE)
    docs = [json.loads(e) for e in answer.events]
    assert [d["text_output"] for d in docs] == ["t0", "t1", "t2"]
    assert answer.body.startswith(b'data: {"PARAMS":"{}","model_name":"generate_probe"')


@pytest.mark.parametrize(
    ("mode", "status", "events"),
    [
        ("none", 200, []),  # the empty final response sends nothing
        ("one", 200, [{"text_output": "e"}]),  # nor the final flag after a response
        ("error_first", 500, [{"error": "first failed"}]),  # the first response's status
        ("error_mid", 200, [{"text_output": "e"}, {"error": "then failed"}]),
    ],
)
def test_stream_statuses_errors_and_the_empty_final_response(
    daemon: Daemon, mode: str, status: int, events: list[dict[str, str]]
) -> None:
    body = json.dumps({"text_input": "e", "MODE": mode})
    answer = post(url(daemon, "generate_probe", "generate_stream"), body)
    assert (answer.status, answer.content_type) == (status, SSE)
    docs = [json.loads(e) for e in answer.events]
    assert [{k: d[k] for k in d if k in ("text_output", "error")} for d in docs] == events


def test_a_model_that_is_not_decoupled_streams_one_event(daemon: Daemon) -> None:
    answer = curl(url(daemon, "generate_probe_sync", "generate_stream"), '{"text_input": "q"}')
    assert (answer.status, answer.content_type) == (200, SSE)
    assert [json.loads(e) for e in answer.events] == [
        {"model_name": "generate_probe_sync", "model_version": "1", "text_output": "Q"}
    ]


def test_curl_streams_the_example_model_token_by_token(daemon: Daemon) -> None:
    body = '{"text_input": "hello big world", "stream": true, "max_tokens": 2}'
    answer = curl(url(daemon, "tiny_llm", "generate_stream"), body)
    assert answer.status == 200
    docs = [json.loads(e) for e in answer.events]
    assert [d["text_output"] for d in docs] == ["olleh", " gib"]
    assert [(d["num_input_tokens"], d["num_output_tokens"]) for d in docs] == [(3, 1), (3, 1)]


# -- the client going away, and a slow one ---------------------------------------------------

LONG_PROMPT = " ".join(f"w{i}" for i in range(300))


@pytest.mark.parametrize("kind", ["generate_stream", "generate"])
def test_a_client_that_goes_away_cancels_the_models_work(daemon: Daemon, kind: str) -> None:
    """is_cancelled() turns true in the model (it counts it); Triton 2.51 cancels only on
    generate_stream."""
    name = "tiny_llm_cancelled_total"
    before = metric(daemon.metrics_url, name) or 0.0
    body = json.dumps({"text_input": LONG_PROMPT, "stream": kind == "generate_stream",
                       "max_tokens": 300})  # fmt: skip
    if kind == "generate_stream":
        got = asyncio.run(first_events_then_leave(url(daemon, "tiny_llm", kind), body, 2))
        assert len(got) >= 2
    else:
        with send_request(daemon.http_url, f"/v2/models/tiny_llm/{kind}", body):
            time.sleep(0.5)  # the model is working (300 tokens, 20 ms each)
    assert wait_for_metric(daemon.metrics_url, name, before + 1) == before + 1


def test_a_client_that_does_not_read_holds_a_bounded_amount_then_is_cut_off(daemon: Daemon) -> None:
    """The model floods 2000 responses of 64 KiB (125 MiB); the client reads nothing. The
    daemon holds at most --http-stream-buffer-bytes of them, then cancels the request and ends
    the stream with an error event after what was held."""
    name = "generate_probe_cancelled_total"
    before = metric(daemon.metrics_url, name) or 0.0
    rss_before = rss_anon_bytes(daemon.pid)
    sock = send_request(
        daemon.http_url,
        "/v2/models/generate_probe/generate_stream",
        '{"text_input": "f", "MODE": "flood"}',
    )
    try:
        wait_for_metric(daemon.metrics_url, name, before + 1)  # cut off while nothing is read
        grown = rss_anon_bytes(daemon.pid) - rss_before
        assert grown < 48 * 1024 * 1024, f"the daemon grew by {grown} bytes"
        received = b""
        while not received.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            received += chunk
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 200")
    last = received.rstrip(b"\r\n0").rsplit(b"data: ", 1)[1]
    error = json.loads(last)["error"]
    assert "reads too slowly" in error and "--http-stream-buffer-bytes" in error
    sent = received.count(b'"text_output":"xxx')
    assert 0 < sent < 2000


# -- what the daemon counts ------------------------------------------------------------------


def test_generate_requests_are_in_statistics_and_the_first_response_histogram(
    daemon: Daemon,
) -> None:
    stats_url = f"http://{daemon.http_url}/v2/models/generate_probe_sync/stats"

    def successes() -> int:
        with urllib.request.urlopen(stats_url, timeout=10) as response:
            doc = json.loads(response.read())
        return int(doc["model_stats"][0]["inference_stats"]["success"]["count"])

    labels = 'model="generate_probe_sync",version="1"'
    family = "nv_inference_first_response_histogram_ms"
    count = metric(daemon.metrics_url, f"{family}_count", labels)
    assert count is not None  # served: --metrics-histogram-latencies
    before = successes()
    post(url(daemon, "generate_probe_sync"), '{"text_input": "s"}')
    post(url(daemon, "generate_probe_sync", "generate_stream"), '{"text_input": "s"}')
    assert successes() == before + 2
    wait_until(
        lambda: metric(daemon.metrics_url, f"{family}_count", labels) == count + 2,
        10,
        "two more first responses",
    )
    bucket = metric(daemon.metrics_url, f"{family}_bucket", 'le="5000",' + labels)
    assert bucket is not None and bucket >= 2
