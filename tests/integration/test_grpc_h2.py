"""pbd's own HTTP/2 gRPC server against the real grpcio client (through tritonclient):
deadlines, compression, large messages both ways, many calls on one channel, long streams,
and raw hostile connections the daemon must shrug off."""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hpack import Encoder
from pbd_harness import (
    EXAMPLE_MODELS,
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
)

from pbd.h2 import frames as f

MODELS = ("add_sub", "identity_fp32", "sleepy")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("h2")
    sources = {
        "add_sub": EXAMPLE_MODELS / "add_sub",
        "identity_fp32": EXAMPLE_MODELS / "identity_fp32",
    }
    sources["sleepy"] = TEST_MODELS / "sleepy"
    repository = make_repository(workdir, sources)
    with running_daemon(repository, workdir, settle=list(MODELS)) as running:
        yield running


def _add_sub_inputs(value: float) -> list[Any]:
    a = np.full(4, value, dtype=np.float32)
    return [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]


def _serves(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer("add_sub", _add_sub_inputs(2.0), client_timeout=SETTLE_TIMEOUT_S)
    assert result.as_numpy("OUTPUT0").tolist() == [4.0] * 4


def test_deadline_expiry_is_deadline_exceeded_and_the_daemon_keeps_serving(
    daemon: Daemon,
) -> None:
    client = daemon.client()
    delay = infer_input("DELAY_MS", np.array([1500], dtype=np.int32), "INT32")
    error = error_of(lambda: client.infer("sleepy", [delay], client_timeout=0.2))
    assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
    _serves(client)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_client_compression(daemon: Daemon, algorithm: str) -> None:
    client = daemon.client()
    data = np.tile(np.arange(256, dtype=np.float32), (64, 4))  # compressible, 256 KiB
    result = client.infer(
        "identity_fp32",
        [infer_input("INPUT0", data, "FP32")],
        compression_algorithm=algorithm,
        client_timeout=SETTLE_TIMEOUT_S,
    )
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)


def test_64_mib_request_and_response(daemon: Daemon) -> None:
    client = daemon.client()
    data = np.random.default_rng(0).random((4096, 4096), dtype=np.float32)  # 64 MiB
    result = client.infer(
        "identity_fp32", [infer_input("INPUT0", data, "FP32")], client_timeout=SETTLE_TIMEOUT_S
    )
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)


def test_many_concurrent_calls_on_one_channel(daemon: Daemon) -> None:
    """More calls at once than the server's SETTINGS_MAX_CONCURRENT_STREAMS: the client queues
    the rest, and every call gets its own answer."""
    client = daemon.client()
    answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
    count = 1100
    for i in range(count):
        client.async_infer(
            "add_sub",
            _add_sub_inputs(float(i)),
            callback=lambda result, error, i=i: answers.put((i, result, error)),
            client_timeout=SETTLE_TIMEOUT_S,
        )
    seen = set()
    for _ in range(count):
        i, result, error = answers.get(timeout=SETTLE_TIMEOUT_S)
        assert error is None, error
        assert result.as_numpy("OUTPUT0").tolist() == [2.0 * i] * 4
        seen.add(i)
    assert seen == set(range(count))


def test_a_stream_with_many_messages(daemon: Daemon) -> None:
    client = daemon.client()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    count = 500
    try:
        for i in range(count):
            client.async_stream_infer("add_sub", _add_sub_inputs(float(i)), request_id=str(i))
        for i in range(count):  # a non-decoupled model's answers come in request order
            result, error = answers.get(timeout=SETTLE_TIMEOUT_S)
            assert error is None, error
            assert result.get_response().id == str(i)
            assert result.as_numpy("OUTPUT0").tolist() == [2.0 * i] * 4
    finally:
        client.stop_stream()


# -- hostile connections ----------------------------------------------------------------------


def _raw(daemon: Daemon) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=SETTLE_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_http1_request_gets_goaway_and_the_daemon_keeps_serving(daemon: Daemon) -> None:
    with _raw(daemon) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        data = _read_until_closed(sock)
    goaway = data[data.rindex(b"not an HTTP/2 client preface") - 17 :]
    assert goaway[3] == f.GOAWAY and int.from_bytes(goaway[13:17], "big") == f.PROTOCOL_ERROR
    _serves(daemon.client())


MODEL_INFER = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"pbd"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


def _send_until_closed(sock: socket.socket, data: bytes) -> None:
    """What an attacker does: send until the server closes (it may, part way)."""
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _goaway_code_and_reason(data: bytes) -> tuple[int, bytes]:
    pos, last = 0, None
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] == f.GOAWAY:
            last = data[pos + 9 : pos + 9 + length]
        pos += 9 + length
    assert last is not None, "no GOAWAY"
    return int.from_bytes(last[4:8], "big"), last[8:]


@pytest.mark.parametrize("flood", ["rapid reset", "pings", "settings"])
def test_floods_get_goaway_enhance_your_calm_and_the_daemon_keeps_serving(
    daemon: Daemon, flood: str
) -> None:
    encoder = Encoder()
    message = b"\x00\x00\x00\x00\x00"  # an empty ModelInfer request: answered or cancelled
    wire = [f.PREFACE, f.settings({})]
    if flood == "rapid reset":
        for i in range(3000):
            stream = 1 + 2 * i
            block = encoder.encode(MODEL_INFER)
            wire += [
                f.frame(f.HEADERS, f.END_HEADERS, stream, block),
                f.frame(f.DATA, f.END_STREAM, stream, message),
                f.rst_stream(stream, f.CANCEL),
            ]
    elif flood == "pings":
        wire += [f.frame(f.PING, 0, 0, b"12345678")] * 20_000
    else:
        wire += [f.settings({f.MAX_FRAME_SIZE: 20_000})] * 5_000
    with _raw(daemon) as attacker, ThreadPoolExecutor(2) as pool:
        reading = pool.submit(_read_until_closed, attacker)
        sending = pool.submit(_send_until_closed, attacker, b"".join(wire))
        _serves(daemon.client())  # while the attack is under way
        sending.result(timeout=SETTLE_TIMEOUT_S)
        answered = reading.result(timeout=SETTLE_TIMEOUT_S)
    code, reason = _goaway_code_and_reason(answered)
    assert code == f.ENHANCE_YOUR_CALM
    assert {"rapid reset": b"rapid reset", "pings": b"too_many_pings", "settings": b"SETTINGS"}[
        flood
    ] in reason
    _serves(daemon.client())
