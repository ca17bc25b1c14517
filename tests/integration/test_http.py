"""The HTTP/REST binding with the real ``tritonclient.http``, and plain urllib as curl users do."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from pbd_harness import (
    EXAMPLE_MODELS,
    ROOT,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    make_repository,
)
from test_models import SAMPLES
from tritonclient.utils import InferenceServerException

JSON_SAFE = [t for t in SAMPLES if t not in ("BYTES", "FP16")] + ["FP16"]


@pytest.fixture(scope="module")
def http(examples_daemon: Daemon) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(examples_daemon.http_url)


@pytest.fixture(scope="module")
def http_models(models_daemon: Daemon) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(models_daemon.http_url)


def _input(name: str, data: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary)
    return tensor


def _urlopen(daemon: Daemon, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{daemon.http_url}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def test_health_metadata_config_and_index(http: httpclient.InferenceServerClient) -> None:
    assert http.is_server_live() and http.is_server_ready()
    assert http.get_server_metadata()["name"] == "pbd"
    assert http.is_model_ready("add_sub") and not http.is_model_ready("nope")
    meta = http.get_model_metadata("identity_fp32")
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
    assert meta["versions"] == ["1"] and meta["platform"] == "python"
    config = http.get_model_config("add_sub")
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["dims"] == [4]
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["add_sub"]["state"] == "READY"


@pytest.mark.parametrize("binary", [True, False])
def test_add_sub_json_and_binary(http: httpclient.InferenceServerClient, binary: bool) -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 2, np.float32)
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
    result = http.infer(
        "add_sub",
        [_input("INPUT0", a, "FP32", binary), _input("INPUT1", b, "FP32", binary)],
        outputs=outputs,
    )
    assert result.as_numpy("OUTPUT1").tolist() == (a - b).tolist()
    assert result.as_numpy("OUTPUT0") is None  # only what was asked for


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_every_datatype_binary(
    http_models: httpclient.InferenceServerClient, datatype: str
) -> None:
    data = SAMPLES[datatype]
    result = http_models.infer(
        "identity_all",
        [_input(f"IN_{datatype}", data, datatype, True)],
        outputs=[httpclient.InferRequestedOutput(f"OUT_{datatype}", binary_data=True)],
    )
    got = result.as_numpy(f"OUT_{datatype}")
    assert got.tolist() == data.tolist()


@pytest.mark.parametrize("datatype", JSON_SAFE)
def test_every_datatype_json(http_models: httpclient.InferenceServerClient, datatype: str) -> None:
    data = SAMPLES[datatype]
    if datatype in ("FP32", "FP64", "FP16"):
        data = data[np.isfinite(data)]  # JSON has no infinities
    result = http_models.infer(
        "identity_all",
        [_input(f"IN_{datatype}", data, datatype, False)],
        outputs=[httpclient.InferRequestedOutput(f"OUT_{datatype}", binary_data=False)],
    )
    assert result.as_numpy(f"OUT_{datatype}").tolist() == data.tolist()


def test_bytes_as_json_strings(http: httpclient.InferenceServerClient) -> None:
    words = np.array(["héllo".encode(), b"", b"abc"], dtype=np.object_)
    result = http.infer(
        "string_ops",
        [_input("INPUT0", words, "BYTES", False)],
        outputs=[
            httpclient.InferRequestedOutput("UPPER", binary_data=False),
            httpclient.InferRequestedOutput("LENGTH", binary_data=False),
        ],
    )
    assert [w.decode() if isinstance(w, bytes) else w for w in result.as_numpy("UPPER")] == [
        "HÉLLO",
        "",
        "ABC",
    ]
    assert result.as_numpy("LENGTH").tolist() == [6, 0, 3]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(
    http: httpclient.InferenceServerClient, algorithm: str
) -> None:
    data = np.random.default_rng(1).random((1, 4096), dtype=np.float32)
    result = http.infer(
        "identity_fp32",
        [_input("INPUT0", data, "FP32", True)],
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)


def test_large_binary_tensor(http: httpclient.InferenceServerClient) -> None:
    data = np.random.default_rng(2).random((1, 4 * 1024 * 1024), dtype=np.float32)  # 16 MiB
    result = http.infer("identity_fp32", [_input("INPUT0", data, "FP32", True)])
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)


def test_repository_load_and_unload(http_models: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="explicit model load / unload"):
        http_models.load_model("add_sub")


def test_plain_json_requests_like_curl(examples_daemon: Daemon) -> None:
    status, _ = _urlopen(examples_daemon, "/v2/health/ready")
    assert status == 200
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [2, 2], "datatype": "FP32", "data": [[1, 1], [1, 1]]},
        ]
    }
    status, reply = _urlopen(examples_daemon, "/v2/models/add_sub/infer", body)
    assert status == 400 and "unexpected shape for input 'INPUT1'" in reply["error"]
    body["inputs"][1]["shape"] = [4]
    body["inputs"][1]["data"] = [1, 1, 1, 1]
    status, reply = _urlopen(examples_daemon, "/v2/models/add_sub/versions/1/infer", body)
    assert status == 200
    outputs = {o["name"]: o for o in reply["outputs"]}
    assert outputs["OUTPUT0"]["data"] == [2, 3, 4, 5] and outputs["OUTPUT0"]["shape"] == [4]
    assert reply["model_version"] == "1"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2"),
        ("GET", "/v2/models/add_sub"),
        ("GET", "/v2/models/add_sub/config"),
        ("GET", "/v2/models/add_sub/stats"),
        ("GET", "/v2/models/stats"),
        ("POST", "/v2/repository/index"),
        ("GET", "/v2/trace/setting"),
        ("POST", "/v2/models/add_sub/infer"),
    ],
)
def test_json_answers_carry_tritons_content_type(
    examples_daemon: Daemon, method: str, path: str
) -> None:
    """``application/json`` with no charset, as Triton 2.51 sends every JSON answer (checked
    against it: /v2, a model's metadata, config and statistics, the index, infer)."""
    body = None
    if path.endswith("/infer"):
        tensor = {"shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
        inputs = [{"name": n, **tensor} for n in ("INPUT0", "INPUT1")]
        body = json.dumps({"inputs": inputs}).encode()
    elif method == "POST":
        body = b"{}"
    url = f"http://{examples_daemon.http_url}{path}"
    request = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "application/json"


def test_one_connection_as_tritonclient_uses_it(examples_daemon: Daemon) -> None:
    """Readiness, metadata, config and inference, then statistics, then the same again, on one
    connection: the edge answers up to the statistics (aiohttp would add its Server header),
    aiohttp from there on; the answers are the same either way. With front ends (the
    default on two CPUs or more, or PBD_TEST_FRONTENDS), whose edge answers infer only, the
    rest goes to aiohttp."""
    host, port = examples_daemon.http_url.rsplit(":", 1)
    connection = HTTPConnection(host, int(port), timeout=30)
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
            ]
        }
    )

    def ask(method: str, path: str, payload: str | None = None) -> tuple[int, str, bytes]:
        connection.request(method, path, payload)
        answer = connection.getresponse()
        return answer.status, answer.getheader("Server") or "", answer.read()

    fronts = examples_daemon.front_ends() > 0
    control = ["/v2/health/ready", "/v2/models/add_sub/ready", "/v2/models/add_sub",
               "/v2/models/add_sub/versions/1/config"]  # fmt: skip
    try:
        first = {}
        if not fronts:
            for path in control:
                status, server, first[path] = ask("GET", path)
                assert (status, server) == (200, ""), path
            assert json.loads(first["/v2/models/add_sub"])["name"] == "add_sub"
        for path in ("/v2/models/add_sub/infer", "/v2/models/add_sub/versions/1/infer"):
            status, server, reply = ask("POST", path, body)
            assert (status, server) == (200, "")
            sums = {o["name"]: o["data"] for o in json.loads(reply)["outputs"]}
            assert sums == {"OUTPUT0": [2, 3, 4, 5], "OUTPUT1": [0, 1, 2, 3]}
        status, server, _ = ask("GET", "/v2/models/add_sub/stats")
        assert status == 200 and "aiohttp" in server
        for path in control if not fronts else ():
            status, server, again = ask("GET", path)
            assert status == 200 and "aiohttp" in server, path
            assert json.loads(again or b"{}") == json.loads(first[path] or b"{}"), path
        status, server, reply = ask("POST", "/v2/models/add_sub/infer", body)
        assert status == 200 and "aiohttp" in server
        assert json.loads(reply)["outputs"][0]["data"] in ([2, 3, 4, 5], [0, 1, 2, 3])
    finally:
        connection.close()
    # A new connection starts at the edge again, errors included.
    connection = HTTPConnection(host, int(port), timeout=30)
    try:
        status, server, reply = ask("POST", "/v2/models/nope/infer", body)
        assert (status, server) == (404, "")
        assert json.loads(reply) == {"error": "Request for unknown model: 'nope' is not found"}
        if not fronts:
            status, server, reply = ask("GET", "/v2/models/nope")
            assert (status, server) == (404, "")
            assert "unknown model" in json.loads(reply)["error"]
    finally:
        connection.close()


def test_every_models_statistics_on_a_new_connection(examples_daemon: Daemon) -> None:
    """GET /v2/models/stats is every model's statistics, not the metadata of a model named
    "stats", also as the first request of a connection (the edge hands it to aiohttp)."""
    status, reply = _urlopen(examples_daemon, "/v2/models/stats")
    assert status == 200
    names = {entry["name"] for entry in reply["model_stats"]}
    assert {"add_sub", "identity_fp32"} <= names


_ADD_SUB = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ]
    }
).encode()
_INFER = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"


def _plain_infer() -> bytes:
    return _INFER + b"Content-Length: %d\r\n\r\n" % len(_ADD_SUB) + _ADD_SUB


_MAX_BODY = 65536  # --http-max-body-bytes of the attacked daemon


def _encoded(body: bytes) -> bytes:
    """``body`` in gzip, then the same request plain on the same connection."""
    packed = gzip.compress(body)
    head = b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    return _INFER + head + packed + _plain_infer()


_ATTACKS = {
    name: case
    for name, case in zip(
        ["two-lengths", "length-and-chunked", "negative-length", "signed-length", "bare-lf",
         "long-head", "lower-case-method", "get-infer", "pipelined", "obs-fold", "bare-cr",
         "control-in-value", "space-before-colon", "chunked", "gzip", "not-gzip",
         "gzip-past-the-limit"],
        [
        (_INFER + b"Content-Length: %d\r\nContent-Length: 0\r\n\r\n" % len(_ADD_SUB) + _ADD_SUB,
         [400]),
        (_INFER + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", [400]),
        (_INFER + b"Content-Length: -1\r\n\r\n", [400]),
        (_INFER + b"Content-Length: +%d\r\n\r\n" % len(_ADD_SUB) + _ADD_SUB, [400]),
        (b"GET /v2/health/ready HTTP/1.1\nHost: x\n\n", [400]),
        (b"GET /v2/health/ready HTTP/1.1\r\nX-A: " + b"a" * 20000 + b"\r\n\r\n", [400]),
        (b"get /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", [400]),
        (b"GET /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n\r\n", [405]),
        (_plain_infer() + _plain_infer(), [200, 200]),
        (_INFER + b"X-A: 1\r\n folded\r\n" + _plain_infer()[len(_INFER):], [400]),
        (_INFER + b"X-A: 1\rX-B: 2\r\n" + _plain_infer()[len(_INFER):], [400]),
        (_INFER + b"X-A: 1\x01\r\n" + _plain_infer()[len(_INFER):], [400]),
        (_INFER + b"X-A : 1\r\n" + _plain_infer()[len(_INFER):], [400]),
        (_INFER + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(_ADD_SUB) + _ADD_SUB
         + b"\r\n0\r\n\r\n", [200]),
        (_encoded(_ADD_SUB), [200, 200]),
        (_INFER + b"Content-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello", [400]),
        (_encoded(b"[" + b" " * _MAX_BODY + b"]")[: -len(_plain_infer())], [413]),
    ],
        strict=True,
    )
}  # fmt: skip


def test_requests_an_attacker_sends(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    """Raw requests as an attacker (or a careless client) writes them, on a new connection
    each: refused with 400 where Triton 2.51 closes the connection without an answer (405
    and two answers where it answers so), and the daemon serves on. A daemon of its own:
    aiohttp logs a traceback for each malformed request, which other tests would see.
    Triton 2.51 answers a control character in a value and a space before the colon (200):
    pbd refuses them (400), as it refuses every head two parsers could read differently.
    gzip: 200 as Triton, 400 for a body that is not gzip (Triton: 400 too); one that
    inflates past --http-max-body-bytes is 413 (the edge's limit, once decoded)."""
    daemon = start_daemon(
        make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"}),
        "--http-max-body-bytes", str(_MAX_BODY),
        settle=["add_sub"],
    )  # fmt: skip
    host, port = daemon.http_url.rsplit(":", 1)
    for name, (raw, statuses) in _ATTACKS.items():
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(raw)
            reader = sock.makefile("rb")
            got = []
            for _ in statuses:
                status = int(reader.readline().split()[1])
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    key, _, value = line.decode("latin-1").partition(":")
                    if key.strip().lower() == "content-length":
                        length = int(value)
                reader.read(length)
                got.append(status)
        assert got == statuses, name
    assert _urlopen(daemon, "/v2/health/ready")[0] == 200


def test_bad_input_over_http(examples_daemon: Daemon) -> None:
    cases = [
        ("/v2/models/nope/infer", {"inputs": []}, 404, "Request for unknown model: 'nope'"),
        ("/v2/models/add_sub/infer", None, 400, "failed to parse the request JSON"),
        (
            "/v2/models/add_sub/infer",
            {"inputs": [
                {"name": "INPUT0", "shape": [4], "datatype": "INT32", "data": [1, 2, 3, 4]},
                {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            ]},
            400,
            "data-type is 'INT32', but model 'add_sub' expects 'FP32'",
        ),
        ("/v2/systemsharedmemory/status", None, 501, "Client shared memory is disabled"),
    ]  # fmt: skip
    for path, body, code, message in cases:
        if body is None and path.endswith("/infer"):
            request = urllib.request.Request(
                f"http://{examples_daemon.http_url}{path}", data=b"{not json"
            )
            try:
                urllib.request.urlopen(request, timeout=30)
                raise AssertionError("malformed JSON was accepted")
            except urllib.error.HTTPError as exc:
                status, reply = exc.code, json.loads(exc.read())
        else:
            status, reply = _urlopen(examples_daemon, path, body)
        assert status == code and message in reply["error"], (path, status, reply)


def test_binary_size_that_lies(examples_daemon: Daemon) -> None:
    header = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                     "parameters": {"binary_data_size": 64}}]}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"http://{examples_daemon.http_url}/v2/models/identity_fp32/infer",
        data=header + bytes(16),
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 400
    assert "binary_data_size 64 runs past the 16 bytes" in json.loads(info.value.read())["error"]
    assert httpclient.InferenceServerClient(examples_daemon.http_url).is_server_live()


def test_triton_style_http_client_script(examples_daemon: Daemon) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "client_add_sub_http.py"), "--url",
         examples_daemon.http_url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout


def test_oversized_body_and_explicit_load_unload(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(
        TEST_MODELS, "--model-control-mode", "explicit", "--http-max-body-bytes", "4096"
    )
    client = httpclient.InferenceServerClient(daemon.http_url)
    assert not client.is_model_ready("optional_add")
    client.load_model("optional_add")
    assert client.is_model_ready("optional_add")
    client.unload_model("optional_add")
    assert not client.is_model_ready("optional_add")
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        client.load_model("no_such_model")
    status, reply = _urlopen(daemon, "/v2/models/optional_add/infer", {"pad": "x" * 8192})
    assert status == 413 and "exceeds the limit of 4096 bytes" in reply["error"]
    assert client.is_server_live()


def test_http_can_be_turned_off(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(EXAMPLE_MODELS, "--allow-http", "false", settle=["add_sub"])
    assert "HTTP server listening" not in daemon.log()
    assert "gRPC server listening" in daemon.log()


@pytest.mark.parametrize(
    ("encoding", "body", "message"),
    [
        ("gzip", b"not gzip at all", "does not decode as Content-Encoding 'gzip'"),
        ("deflate", b"not deflate either", "does not decode as Content-Encoding 'deflate'"),
        ("x-unknown", b'{"inputs": []}', "unsupported Content-Encoding 'x-unknown'"),
    ],
)
def test_a_body_that_does_not_decode_is_a_client_error(
    examples_daemon: Daemon, encoding: str, body: bytes, message: str
) -> None:
    """Issue 18, findings 7 and 8: 400 naming the encoding (was 500, or ignored)."""
    request = urllib.request.Request(
        f"http://{examples_daemon.http_url}/v2/models/add_sub/infer",
        data=body,
        headers={"Content-Encoding": encoding},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 400
    assert message in json.loads(caught.value.read())["error"]
    assert "Traceback" not in examples_daemon.log()
