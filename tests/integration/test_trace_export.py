"""The real OTLP gRPC exporter, in the daemon, sending to a real OTLP receiver in the test,
and the trace and log extensions answered as Triton answers them (tritonclient)."""

from __future__ import annotations

import http.server
import os
import re
import signal
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from pbd_harness import (
    DEFAULT_LOG_SETTINGS,
    TEST_MODELS,
    Daemon,
    error_of,
    free_port,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)
from test_frontends import pinned_client, two_fronts

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
OBSERVE_S = 1.0  # how long an answer that must not come yet is watched for


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP collector's trace service that keeps what it is sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[Any] = []

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
        with self.lock:
            for resource_spans in request.resource_spans:
                service = {
                    kv.key: kv.value.string_value for kv in resource_spans.resource.attributes
                }.get("service.name")
                for scope_spans in resource_spans.scope_spans:
                    self.spans += [(service, span) for span in scope_spans.spans]
        return trace_service_pb2.ExportTraceServiceResponse()

    def names(self, trace_id: str) -> set[str]:
        with self.lock:
            return {s.name for _, s in self.spans if s.trace_id.hex() == trace_id}


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    port = free_port()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(grace=None).wait()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return make_repository(tmp_path, {"traced": TEST_MODELS / "traced"})


@pytest.mark.parametrize("fronts", [(), ("--frontends", "2")], ids=["daemon", "fronts"])
def test_spans_reach_an_otlp_receiver(
    receiver: tuple[Receiver, int], repository: Path, tmp_path: Path, fronts: tuple[str, ...]
) -> None:
    """With front ends the client's traceparent goes from the front end to the daemon, which
    samples and traces the request (a traced model does not take the direct path)."""
    servicer, port = receiver
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "pbd-under-test",
    }
    args = ("--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1", *fronts)
    with running_daemon(repository, tmp_path, *args, settle=["traced"], env=env) as daemon:
        data = np.ones(3, dtype=np.float32)
        daemon.client().infer(
            "traced",
            [infer_input("INPUT0", data, "FP32")],
            headers={"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"},
        )
        want = {"inference.GRPCInferenceService/ModelInfer", "compute", "execute", "model.work"}
        wait_until(lambda: want <= servicer.names(TRACE_ID), 60, "spans at the receiver")
    with servicer.lock:
        assert {service for service, _ in servicer.spans} == {"pbd-under-test"}
        server = next(s for _, s in servicer.spans if s.name.endswith("/ModelInfer"))
    assert server.parent_span_id.hex() == "b7ad6b7169203331"


def test_a_trace_setting_answers_once_every_front_end_has_its_table(
    receiver: tuple[Receiver, int], repository: Path, tmp_path: Path
) -> None:
    """A setting that makes a model traceable takes it off the direct path in every front end
    before the RPC answers: the next request, through any front end, is traced. A front end
    that cannot take the new table (stopped here) holds the answer back."""
    servicer, port = receiver
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    args = ("--trace-config", "level=OFF", "--frontends", "2")
    with running_daemon(repository, tmp_path, *args, settle=["traced"], env=env) as daemon:
        pids = two_fronts(daemon)
        asking, later = (pinned_client(daemon, pid, pids) for pid in pids)
        data = np.ones(3, dtype=np.float32)
        later.infer("traced", [infer_input("INPUT0", data, "FP32")])  # direct: not traced
        with futures.ThreadPoolExecutor(1) as pool:
            os.kill(pids[1], signal.SIGSTOP)
            try:
                update = pool.submit(
                    asking.update_trace_settings,
                    model_name="traced",
                    settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
                )
                finished, _ = futures.wait([update], timeout=OBSERVE_S)
                assert not finished, "answered before the stopped front end had the table"
            finally:
                os.kill(pids[1], signal.SIGCONT)
            update.result(timeout=60)
        later.infer(
            "traced",
            [infer_input("INPUT0", data, "FP32")],
            headers={"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"},
        )
        want = {"inference.GRPCInferenceService/ModelInfer", "compute", "execute"}
        wait_until(lambda: want <= servicer.names(TRACE_ID), 60, "the next request's spans")


class _OtlpHttpHandler(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, Any]]  # (path, content type, span)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.received += [
                    (self.path, self.headers["Content-Type"], span) for span in scope_spans.spans
                ]
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def test_tritons_otlp_http_url_gets_the_spans(repository: Path, tmp_path: Path) -> None:
    """Triton's --trace-config form: OTLP over HTTP (protobuf) to exactly that URL, with
    Triton's attribute names on the request's span."""
    handler = type("Handler", (_OtlpHttpHandler,), {"received": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    args = (
        "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1", "--trace-config", f"opentelemetry,url={url}",
        "--trace-config", "opentelemetry,bsp_schedule_delay=50",
    )  # fmt: skip
    try:
        with running_daemon(repository, tmp_path, *args, settle=["traced"]) as daemon:
            daemon.client().infer(
                "traced",
                [infer_input("INPUT0", np.ones(3, dtype=np.float32), "FP32")],
                headers={"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"},
            )

            def names() -> set[str]:
                return {s.name for _, _, s in handler.received if s.trace_id.hex() == TRACE_ID}

            want = {"inference.GRPCInferenceService/ModelInfer", "compute", "execute"}
            wait_until(lambda: want <= names(), 60, "spans at the OTLP/HTTP receiver")
    finally:
        server.shutdown()
        server.server_close()
    assert {(path, kind) for path, kind, _ in handler.received} == {
        ("/v1/traces", "application/x-protobuf")
    }
    span = next(s for _, _, s in handler.received if s.name.endswith("/ModelInfer"))
    attributes = {kv.key: kv.value for kv in span.attributes}
    assert attributes["triton.model_name"].string_value == "traced"
    assert attributes["triton.model_version"].int_value == 1  # the version that ran it


def test_exporter_trouble_is_logged_as_the_daemon_logs(repository: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    args = (
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url={url}",
        "--trace-config", "opentelemetry,bsp_schedule_delay=50",
    )  # fmt: skip
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    with running_daemon(repository, tmp_path, *args, settle=["traced"], env=env) as daemon:
        daemon.client().infer(
            "traced", [infer_input("INPUT0", np.ones(3, dtype=np.float32), "FP32")]
        )
        line = wait_until(
            lambda: re.search(r"^\S+ \S+ WARNING \[span exporter\] pbd.tracing: could not "
                              r"export \d+ span\(s\) to " + re.escape(url), daemon.log(), re.M),
            60,
            "the exporter's warning",
        )  # fmt: skip
        assert line


@pytest.fixture
def daemon(repository: Path, tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(
        repository, tmp_path, settle=["traced"], env={"OTEL_TRACES_EXPORTER": "none"}
    ) as daemon:
        yield daemon


def _trace(client: grpcclient.InferenceServerClient, **kwargs: Any) -> dict[str, Any]:
    response = client.update_trace_settings(as_json=True, **kwargs)
    return {k: v["value"] for k, v in response["settings"].items()}


def test_trace_settings_as_triton(daemon: Daemon) -> None:
    client = daemon.client()
    initial = {
        "trace_level": ["OFF"],
        "trace_rate": ["1000"],
        "trace_count": ["-1"],
        "trace_mode": ["opentelemetry"],
    }
    got = client.get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in got.items()} == initial
    model = _trace(client, model_name="traced", settings={"trace_rate": "5"})
    assert model == {**initial, "trace_rate": ["5"]}
    # A global update reaches the model's fields it did not set itself.
    glob = _trace(client, settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "10"})
    assert glob == {**initial, "trace_level": ["TIMESTAMPS"], "trace_rate": ["10"]}
    model = client.get_trace_settings(model_name="traced", as_json=True)["settings"]
    assert model["trace_level"]["value"] == ["TIMESTAMPS"] and model["trace_rate"]["value"] == ["5"]
    cleared = _trace(client, model_name="traced", settings={"trace_rate": None})
    assert cleared["trace_rate"] == ["10"]
    failures = {
        "trace file location can not be updated through network protocol": {"trace_file": "x"},
        "Unable to parse 'trace_rate', got: fast": {"trace_rate": "fast"},
        "Unable to parse 'trace_count'. Expecting value >= -1, got: -2": {"trace_count": "-2"},
        "Expect only one trace level 'OFF' is specified": {"trace_level": ["OFF", "TIMESTAMPS"]},
    }
    for message, settings in failures.items():
        error = error_of(lambda s=settings: client.update_trace_settings(settings=s))
        assert message in error.message(), error.message()
    unknown = error_of(lambda: client.get_trace_settings(model_name="nope"))
    assert "Request for unknown model : nope" in unknown.message()
    assert "trace" in client.get_server_metadata(as_json=True)["extensions"]


def _log_lines(daemon: Daemon, text: str) -> int:
    return daemon.log().count(text)


def test_log_settings_as_triton_reach_workers(daemon: Daemon) -> None:
    client = daemon.client()
    expected = DEFAULT_LOG_SETTINGS
    assert client.get_log_settings(as_json=True)["settings"] == {
        k: {"string_param" if isinstance(v, str) else "bool_param" if isinstance(v, bool)
            else "uint32_param": v} for k, v in expected.items()
    }  # fmt: skip
    data = infer_input("INPUT0", np.ones(1, dtype=np.float32), "FP32")
    client.infer("traced", [data])
    wait_until(lambda: _log_lines(daemon, "traced: info line") == 1, 30, "the info line")
    assert _log_lines(daemon, "traced: verbose line") == 0
    client.update_log_settings({"log_verbose_level": 1, "log_info": False})
    client.infer("traced", [data])
    wait_until(lambda: _log_lines(daemon, "traced: verbose line") == 1, 30, "the verbose line")
    assert _log_lines(daemon, "traced: info line") == 1  # log_info off: no second one
    now = client.get_log_settings(as_json=True)["settings"]
    assert now["log_verbose_level"] == {"uint32_param": 1}
    assert now["log_info"] == {"bool_param": False}
    failures = {
        "log file location can not be updated through network protocol": {"log_file": "x"},
        "invalid argument for log_format, got: fancy": {"log_format": "fancy"},
    }
    for message, settings in failures.items():
        error = error_of(lambda s=settings: client.update_log_settings(s))
        assert message in error.message(), error.message()
