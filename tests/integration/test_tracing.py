"""Traces of real inferences, seen through the SDK's in-memory exporter.

The daemon runs in the test process (``inprocess``) so the exporter is the test's; the model
runs in its worker process as always, and opens a span of its own with the plain
OpenTelemetry API.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from inprocess import inprocess_daemon
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    free_port,
    infer_input,
    make_repository,
    wait_until,
)
from sse_helpers import post

from pbd.tracing.provider import Tracing
from pbd.tracing.settings import parse_trace_config

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SERVER = "inference.GRPCInferenceService/ModelInfer"
SPAN_NAMES = {
    SERVER, "queue", "compute", "input_copy", "execute", "model.work", "output_copy", "response",
}  # fmt: skip
SPAN_COUNT = len(SPAN_NAMES)


class Traced:
    def __init__(self, url: str, http_url: str, exporter: InMemorySpanExporter) -> None:
        self.url = url
        self.http_url = http_url
        self.exporter = exporter

    def infer(self, headers: dict[str, str] | None = None, model: str = "traced") -> str:
        with grpcclient.InferenceServerClient(self.url) as client:
            data = np.arange(4, dtype=np.float32)
            result = client.infer(model, [infer_input("INPUT0", data, "FP32")], headers=headers)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            return result.as_numpy("CONTEXT")[0].decode()

    def spans(self, count: int) -> list[ReadableSpan]:
        """Wait for ``count`` finished spans (worker spans arrive from another process)."""
        wait_until(lambda: len(self.exporter.get_finished_spans()) >= count, 30, "spans")
        return list(self.exporter.get_finished_spans())


@pytest.fixture(scope="module")
def traced_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    repository = make_repository(
        tmp_path_factory.mktemp("tracing"),
        {
            "traced": TEST_MODELS / "traced",
            "repeat_decoupled": TEST_MODELS / "repeat_decoupled",
            "tiny_llm": EXAMPLE_MODELS / "tiny_llm",
        },
    )
    exporter = InMemorySpanExporter()
    config = parse_trace_config(["level=TIMESTAMPS", "rate=1"])
    from pbd.tracing.settings import TraceSettings

    tracing = Tracing(TraceSettings(config), SimpleSpanProcessor(exporter))
    settle = ["traced", "repeat_decoupled", "tiny_llm"]
    http_port = free_port()
    prefix = f"pbdtrace{os.getpid()}"
    with inprocess_daemon(
        repository, prefix, tracing, settle, allow_http=True, http_port=http_port
    ) as url:
        yield Traced(url, f"127.0.0.1:{http_port}", exporter)


@pytest.fixture
def traced(traced_daemon: Traced) -> Iterator[Traced]:
    """The daemon with the global setting back to level=TIMESTAMPS rate=1, no spans kept."""
    with grpcclient.InferenceServerClient(traced_daemon.url) as client:
        client.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1"}
        )
        client.update_trace_settings(
            model_name="traced",
            settings={"trace_level": None, "trace_rate": None, "trace_count": None},
        )
    traced_daemon.exporter.clear()
    yield traced_daemon
    traced_daemon.exporter.clear()


def _by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_one_inference_gives_the_span_tree(traced: Traced) -> None:
    context = traced.infer()
    spans = _by_name(traced.spans(SPAN_COUNT))
    assert set(spans) == SPAN_NAMES
    assert len(traced.exporter.get_finished_spans()) == SPAN_COUNT
    server, compute, execute = spans[SERVER], spans["compute"], spans["execute"]
    assert server.kind is SpanKind.SERVER and server.parent is None
    assert server.attributes is not None
    assert dict(server.attributes) == {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": "ModelInfer",
        "model.name": "traced",
        "model.version": "1",  # the version that ran it (the client asked for the latest)
        "triton.model_name": "traced",
        "triton.model_version": 1,
        "rpc.grpc.status_code": 0,
    }
    assert server.status.status_code is StatusCode.UNSET
    assert [e.name for e in server.events] == ["REQUEST_START", "REQUEST_END"]
    for name in ("queue", "compute", "response"):
        assert _parent_of(spans[name]) == server.context.span_id, name
    for name in ("input_copy", "execute", "output_copy"):
        assert _parent_of(spans[name]) == compute.context.span_id, name
    assert _parent_of(spans["model.work"]) == execute.context.span_id
    assert {s.context.trace_id for s in spans.values()} == {server.context.trace_id}
    assert [e.name for e in spans["queue"].events] == ["QUEUE_START"]
    assert [e.name for e in compute.events] == [
        "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
    ]  # fmt: skip
    stamps = [e.timestamp for e in compute.events]
    assert stamps == sorted(stamps)
    assert compute.attributes is not None
    assert compute.attributes["model.instance"] == "traced_0_0"
    assert execute.attributes is not None
    assert execute.attributes["model.name"] == "traced"
    assert execute.attributes["model.instance"] == "traced_0_0"
    assert spans["model.work"].attributes == {"work.items": 1}
    # The model's request.trace().get_context() is Triton's JSON carrier, naming its execute
    # span, so spans it starts from that context join the trace there too.
    ctx = execute.context
    (carrier,) = json.loads(context).items()
    assert carrier[0] == "traceparent"
    assert carrier[1].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    assert int(carrier[1][-2:], 16) & 1  # sampled


def test_client_traceparent_becomes_the_parent(traced: Traced) -> None:
    traced.infer(headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    spans = _by_name(traced.spans(SPAN_COUNT))
    server = spans[SERVER]
    assert server.parent is not None and server.parent.is_remote
    assert f"{server.parent.span_id:016x}" == PARENT_ID
    assert {f"{s.context.trace_id:032x}" for s in spans.values()} == {TRACE_ID}


def test_rate_zero_traces_nothing(traced: Traced) -> None:
    with grpcclient.InferenceServerClient(traced.url) as client:
        client.update_trace_settings(settings={"trace_rate": "0"})
    for _ in range(3):
        assert traced.infer() == ""  # untraced: get_context() is None
    assert [s.name for s in traced.exporter.get_finished_spans()] == []


def test_trace_setting_changes_apply_to_the_next_request(traced: Traced) -> None:
    with grpcclient.InferenceServerClient(traced.url) as client:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        traced.infer()
        assert [s.name for s in traced.exporter.get_finished_spans()] == []
        # A model's own setting wins over the global one.
        client.update_trace_settings(model_name="traced", settings={"trace_level": ["TIMESTAMPS"]})
        assert traced.infer() != ""
        assert len(traced.spans(SPAN_COUNT)) == SPAN_COUNT
        traced.exporter.clear()
        # Every 2nd request, from the next one on.
        client.update_trace_settings(model_name="traced", settings={"trace_rate": "2"})
        traced_contexts = [traced.infer() for _ in range(4)]
        assert [bool(c) for c in traced_contexts].count(True) == 2
        # trace_count: that many more traces, then none.
        client.update_trace_settings(
            model_name="traced", settings={"trace_rate": "1", "trace_count": "1"}
        )
        assert [bool(traced.infer()) for _ in range(3)] == [True, False, False]
        settings = client.get_trace_settings(model_name="traced", as_json=True)["settings"]
        assert settings["trace_count"] == {"value": ["0"]}


def test_model_errors_mark_the_server_span(traced: Traced, tmp_path: Path) -> None:
    with grpcclient.InferenceServerClient(traced.url) as client:
        bad = infer_input("INPUT0", np.zeros(2, dtype=np.int32), "INT32")
        with pytest.raises(Exception, match="INPUT0"):
            client.infer("traced", [bad])
    (server,) = traced.spans(1)
    assert server.name == SERVER
    assert server.status.status_code is StatusCode.ERROR
    assert server.attributes is not None and server.attributes["rpc.grpc.status_code"] == 3


def test_a_decoupled_request_is_traced_to_its_final_response(traced: Traced) -> None:
    """ModelStreamInfer to a decoupled model: the client's traceparent is the parent, a
    response span per response sent, and the server span ends with the final one."""
    got: list[object] = []
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    with grpcclient.InferenceServerClient(traced.url) as client:
        client.start_stream(
            callback=lambda result, error: got.append(error or result), headers=headers
        )
        inputs = [
            infer_input("IN", np.array([5, 6, 7], dtype=np.int32), "INT32"),
            infer_input("DELAY", np.zeros(3, dtype=np.uint32), "UINT32"),
            infer_input("WAIT", np.zeros(1, dtype=np.uint32), "UINT32"),
        ]
        client.async_stream_infer("repeat_decoupled", inputs)
        wait_until(lambda: len(got) >= 3, 30, "three responses")
        client.stop_stream()
    assert all(not isinstance(g, Exception) for g in got), got
    stream_server = "inference.GRPCInferenceService/ModelStreamInfer"
    wait_until(
        lambda: any(s.name == stream_server for s in traced.exporter.get_finished_spans()),
        30,
        "the server span",
    )
    spans = [
        s for s in traced.exporter.get_finished_spans() if s.context.trace_id == int(TRACE_ID, 16)
    ]
    (server,) = [s for s in spans if s.name == stream_server]
    assert server.parent is not None and server.parent.span_id == int(PARENT_ID, 16)
    assert server.attributes is not None
    assert server.attributes["rpc.method"] == "ModelStreamInfer"
    assert server.attributes["model.name"] == "repeat_decoupled"
    assert server.attributes["rpc.grpc.status_code"] == 0
    responses = [s for s in spans if s.name == "response"]
    assert len(responses) == 3
    for child in [*responses, *[s for s in spans if s.name in ("queue", "compute")]]:
        assert _parent_of(child) == server.context.span_id, child.name
    assert {"queue", "compute", "input_copy", "execute"} <= {s.name for s in spans}
    assert server.end_time is not None
    assert max(r.end_time or 0 for r in responses) <= server.end_time


HTTP_SERVER = "POST /v2/models/{model}/infer"


def test_an_http_inference_is_traced_under_an_http_server_span(traced: Traced) -> None:
    """KServe v2 over HTTP: the ``traceparent`` header is the parent, the server span follows
    the HTTP server conventions, the rest of the tree is gRPC's."""
    data = np.arange(4, dtype=np.float32)
    with httpclient.InferenceServerClient(traced.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        result = client.infer("traced", [tensor], headers=headers)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        bad = httpclient.InferInput("INPUT0", [2], "INT32")
        bad.set_data_from_numpy(np.zeros(2, dtype=np.int32))
        with pytest.raises(Exception, match="INPUT0"):
            client.infer("traced", [bad])
    names = (SPAN_NAMES - {SERVER}) | {HTTP_SERVER}
    spans = traced.spans(len(names) + 1)
    ok = _by_name([s for s in spans if s.context.trace_id == int(TRACE_ID, 16)])
    assert set(ok) == names
    server = ok[HTTP_SERVER]
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and f"{server.parent.span_id:016x}" == PARENT_ID
    assert dict(server.attributes or {}) == {
        "http.request.method": "POST",
        "http.route": "/v2/models/{model}/infer",
        "url.scheme": "http",
        "model.name": "traced",
        "model.version": "1",  # the version that ran it (the client asked for the latest)
        "triton.model_name": "traced",
        "triton.model_version": 1,
        "http.response.status_code": 200,
    }
    assert server.status.status_code is StatusCode.UNSET
    for name in ("queue", "compute", "response"):
        assert _parent_of(ok[name]) == server.context.span_id, name
    assert _parent_of(ok["model.work"]) == ok["execute"].context.span_id
    (refused,) = [s for s in spans if s.context.trace_id != int(TRACE_ID, 16)]
    assert refused.name == HTTP_SERVER
    assert refused.attributes is not None
    assert refused.attributes["http.response.status_code"] == 400
    assert refused.attributes["error.type"] == "400"
    assert refused.status.status_code is StatusCode.UNSET  # a client's error, not the server's


def _server_span(traced: Traced, name: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The server span ``name`` of the client's trace, and every span of that trace."""
    wait_until(
        lambda: any(s.name == name for s in traced.exporter.get_finished_spans()),
        30,
        f"the server span {name}",
    )
    spans = [
        s for s in traced.exporter.get_finished_spans() if s.context.trace_id == int(TRACE_ID, 16)
    ]
    (server,) = [s for s in spans if s.name == name]
    assert server.parent is not None and server.parent.span_id == int(PARENT_ID, 16)
    return server, spans


def test_a_generate_stream_is_traced_with_a_response_span_per_event(traced: Traced) -> None:
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    body = json.dumps({"IN": [5, 6, 7], "DELAY": [0, 0, 0], "WAIT": 0})
    url = f"http://{traced.http_url}/v2/models/repeat_decoupled/generate_stream"
    assert len(post(url, body, headers).events) == 3
    server, spans = _server_span(traced, "POST /v2/models/{model}/generate_stream")
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v2/models/{model}/generate_stream"
    assert server.attributes["http.response.status_code"] == 200
    assert server.status.status_code is StatusCode.UNSET
    responses = [s for s in spans if s.name == "response"]
    assert len(responses) == 3
    for child in [*responses, *[s for s in spans if s.name in ("queue", "compute")]]:
        assert _parent_of(child) == server.context.span_id, child.name


def test_an_openai_chat_is_traced_as_an_http_inference(traced: Traced) -> None:
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    body = json.dumps(
        {"model": "tiny_llm", "messages": [{"role": "user", "content": "a b"}], "stream": True}
    )
    answer = post(f"http://{traced.http_url}/v1/chat/completions", body, headers)
    assert answer.events[-1] == "[DONE]"
    server, spans = _server_span(traced, "POST /v1/chat/completions")
    assert server.attributes is not None
    assert server.attributes["model.name"] == "tiny_llm"
    assert server.attributes["http.response.status_code"] == 200
    assert len([s for s in spans if s.name == "response"]) == 2  # a token each
