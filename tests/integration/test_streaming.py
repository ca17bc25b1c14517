"""ModelStreamInfer as Triton serves it: in-band errors with the stream kept open, request
order for non-decoupled models, ``triton_final_response`` on every response, and a call that
ends with OK once everything is answered after the client half-closes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.service_pb2 as service_pb2
import tritonclient.grpc.service_pb2_grpc as service_pb2_grpc
from hpack import Encoder
from pbd_harness import (
    EXAMPLE_MODELS,
    SETTLE_TIMEOUT_S,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    infer_input,
    make_repository,
    rss_anon_bytes,
    running_daemon,
    wait_until,
)
from streaming_helpers import (
    STREAM_MODELS,
    STREAM_TIMEOUT_S,
    final_flag,
    mode_input,
    open_stream,
    repeat_inputs,
)
from traffic import executing, gated_inputs
from tritonclient.utils import InferenceServerException

from pbd.h2 import frames as f
from pbd.memory.malloc import MIB


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("streaming")
    repository = make_repository(workdir, {m: TEST_MODELS / m for m in STREAM_MODELS})
    with running_daemon(repository, workdir, settle=list(STREAM_MODELS)) as running:
        yield running


def test_good_and_bad_requests_on_one_stream(daemon: Daemon) -> None:
    """Each bad request is answered in band, in its place; the stream goes on."""
    wrong_type = [infer_input("ID", np.array([1.0], dtype=np.float32), "FP32")]
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("gated", gated_inputs(1), request_id="g1")
        client.async_stream_infer("no_such_model", gated_inputs(2), request_id="unknown")
        client.async_stream_infer("gated", wrong_type, request_id="bad-type")
        client.async_stream_infer("gated", gated_inputs(3), request_id="g3")
        client.async_stream_infer("default_sender", mode_input("send_and_return"), request_id="m")
        client.async_stream_infer("gated", gated_inputs(4), request_id="g4")
        got = answers.take(6)
    ok = [r.get_response().id for r, e in got if e is None]
    assert ok == ["g1", "g3", "m", "g4"]
    assert [int(got[i][0].as_numpy("ID")[0]) for i in (0, 3, 5)] == [1, 3, 4]
    # Sent without the flag, then returned too: ModelInfer answers "expected a single
    # response, got 2"; a stream the sent one, as Triton 2.51's stream does.
    assert got[4][0].as_numpy("TEXT")[0] == b"sent"
    errors = [str(e) for r, e in got if e is not None]
    assert "Request for unknown model: 'no_such_model' is not found" in errors[0]
    assert (
        "inference input 'ID' data-type is 'FP32', but model 'gated' expects 'INT32'" in (errors[1])
    )
    # Answers (errors too) keep the order of the requests.
    order = ["g1", "unknown", "bad-type", "g3", "m", "g4"]
    assert [e is None for _, e in got] == [o not in ("unknown", "bad-type") for o in order]


def test_undecodable_messages_are_answered_in_band_and_the_stream_goes_on(daemon: Daemon) -> None:
    """Issue 18, finding 3: a message that does not parse, or that has both ``contents`` and
    raw contents, is answered with its error; the later requests are answered; the call ends."""

    def good(ident: int) -> bytes:
        return service_pb2.ModelInferRequest(
            model_name="gated",
            id=f"g{ident}",
            inputs=[{"name": "ID", "datatype": "INT32", "shape": [1]}],
            raw_input_contents=[np.array([ident], np.int32).tobytes()],
        ).SerializeToString()

    both = service_pb2.ModelInferRequest(
        model_name="gated",
        id="both",
        inputs=[
            {"name": "ID", "datatype": "INT32", "shape": [1], "contents": {"int_contents": [5]}}
        ],
        raw_input_contents=[np.array([5], np.int32).tobytes()],
    ).SerializeToString()
    messages = [good(1), b"\xff\xff\xff", both, good(2)]
    with grpc.insecure_channel(daemon.url) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )
        got = list(call(iter(messages), timeout=STREAM_TIMEOUT_S))
    assert [r.infer_response.id for r in got if not r.error_message] == ["g1", "g2"]
    errors = [r.error_message for r in got if r.error_message]
    assert len(errors) == 2 and errors[0].startswith("malformed request")
    assert "contents field must not be specified when using raw_input_contents" in errors[1]


def test_every_response_says_it_is_final(daemon: Daemon) -> None:
    with open_stream(daemon) as (client, answers):
        for i in range(3):
            client.async_stream_infer("gated", gated_inputs(i), request_id=f"f{i}")
        got = answers.take(3)
    assert [final_flag(r) for r, _ in got] == [True, True, True]


def test_non_decoupled_answers_wait_for_earlier_requests(daemon: Daemon, tmp_path: Path) -> None:
    """A later non-decoupled request that finishes first is held back until the earlier one
    is answered; a decoupled model's responses are not held."""
    gate = tmp_path / "gate"
    gate.touch()
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("gated", gated_inputs(1, gate), request_id="slow")
        wait_until(executing(gate).exists, SETTLE_TIMEOUT_S, "the gated request to run")
        client.async_stream_infer("default_sender", mode_input("return"), request_id="quick")
        client.async_stream_infer("repeat_decoupled", repeat_inputs([8]), request_id="stream")
        ((first, error),) = answers.take(1)
        assert error is None and first.get_response().id == "stream"
        gate.unlink()
        got = answers.take(2)
    assert [r.get_response().id for r, _ in got] == ["slow", "quick"]


def test_stop_stream_returns_once_all_is_answered(daemon: Daemon) -> None:
    """stop_stream() half-closes and waits for the call to end: every answer is in by then."""
    with open_stream(daemon) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs([1, 2, 3], 20, 50))
        for i in range(3):
            client.async_stream_infer("gated", gated_inputs(i))
    got = answers.left()
    assert len(got) == 6 and all(e is None for _, e in got)


def test_a_stream_with_nothing_sent_closes_cleanly(daemon: Daemon) -> None:
    with open_stream(daemon) as (_client, answers):
        pass
    assert answers.left() == []


GRPC_ERROR = {"triton_grpc_error": "true"}


def int_input(name: str, value: int) -> grpcclient.InferInput:
    return infer_input(name, np.array([value], dtype=np.int32), "INT32")


def test_with_triton_grpc_error_a_models_error_ends_the_stream(daemon: Daemon) -> None:
    """Triton 2.51's feature, compared on the same models: requests refused before a model
    (unknown model, wrong input) are answered in band; a model's error ends the call with
    its status, and the stream takes nothing more."""
    wrong_type = [infer_input("ID", np.array([1.0], dtype=np.float32), "FP32")]
    with open_stream(daemon, GRPC_ERROR) as (client, answers):
        client.async_stream_infer("gated", gated_inputs(1), request_id="g1")
        client.async_stream_infer("no_such_model", gated_inputs(2), request_id="unknown")
        client.async_stream_infer("gated", wrong_type, request_id="bad-type")
        client.async_stream_infer("raise_in_execute", [int_input("INPUT0", -1)])
        got = answers.take(4)
        assert [e is None for _, e in got] == [True, False, False, False]
        assert [e.status() for _, e in got[1:]] == [None, None, "StatusCode.INTERNAL"]
        assert "ValueError: boom from execute" in got[3][1].message()
        with pytest.raises(InferenceServerException):  # the call is over
            client.async_stream_infer("gated", gated_inputs(3))
    assert answers.left() == []


def test_with_triton_grpc_error_a_decoupled_models_error_ends_the_stream(daemon: Daemon) -> None:
    with open_stream(daemon, GRPC_ERROR) as (client, answers):
        client.async_stream_infer("repeat_decoupled", repeat_inputs([7]))
        ((first, error),) = answers.take(1)
        assert error is None and int(first.as_numpy("OUT")[0]) == 7
        client.async_stream_infer("decoupled_misuse", mode_input("raise"))
        ((_, error),) = answers.take(1)
        assert error.status() == "StatusCode.INTERNAL"
        assert "Failed to process the request(s) for model 'decoupled_misuse_0_0'" in str(error)


def test_triton_grpc_error_other_than_true_keeps_errors_in_band(daemon: Daemon) -> None:
    with open_stream(daemon, {"triton_grpc_error": "false"}) as (client, answers):
        client.async_stream_infer("raise_in_execute", [int_input("INPUT0", -1)])
        client.async_stream_infer("gated", gated_inputs(5))
        (_, error), (after, ok) = answers.take(2)
    assert error is not None and error.status() is None
    assert ok is None and int(after.as_numpy("ID")[0]) == 5


SLOW_READER_REQUESTS = 200
RESPONSE_FLOATS = 65536  # 256 KiB each: 50 MiB in all, against a 1 MiB buffer


def test_a_client_that_stops_reading_holds_back_its_own_stream_only(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """A client sends many requests and reads none of the answers: the daemon takes only a
    bounded number of them (its memory is not the client's buffer), other clients are served
    meanwhile, and once the client reads, every answer comes, in order, nothing lost."""
    repository = make_repository(tmp_path, {"identity_fp32": EXAMPLE_MODELS / "identity_fp32"})
    daemon = start_daemon(
        repository, "--grpc-stream-buffer-bytes", str(1 << 20), settle=["identity_fp32"]
    )
    sent = 0
    all_sent = threading.Event()

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        nonlocal sent
        for i in range(SLOW_READER_REQUESTS):
            request = service_pb2.ModelInferRequest(model_name="identity_fp32", id=str(i))
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, RESPONSE_FLOATS])
            request.raw_input_contents.append(np.full(RESPONSE_FLOATS, i, np.float32).tobytes())
            sent += 1
            yield request
        all_sent.set()

    channel = grpc.insecure_channel(daemon.url, options=[("grpc.max_receive_message_length", -1)])
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), timeout=120)  # nothing read yet

        def executed() -> int:
            stats = daemon.client().get_inference_statistics("identity_fp32")
            return int(stats.model_stats[0].inference_stats.success.count)

        # The daemon stops taking requests: the count settles well below what was sent.
        wait_until(lambda: executed() > 0, SETTLE_TIMEOUT_S, "the first requests to run")
        settled = wait_until(_steady(executed), SETTLE_TIMEOUT_S, "the daemon to stop taking more")
        assert settled < SLOW_READER_REQUESTS // 2, (settled, sent)
        assert not all_sent.is_set()
        # Another client is served meanwhile.
        other = daemon.client().infer(
            "identity_fp32", [infer_input("INPUT0", np.ones((1, 4), np.float32), "FP32")]
        )
        assert other.as_numpy("OUTPUT0").tolist() == [[1.0] * 4]
        # Now the client reads: everything comes, in order.
        ids = []
        for response in call:
            assert response.error_message == ""
            answer = response.infer_response
            first = np.frombuffer(answer.raw_output_contents[0][:4], np.float32)[0]
            assert int(first) == int(answer.id)
            ids.append(int(answer.id))
            if len(ids) == SLOW_READER_REQUESTS:
                break
        call.cancel()
        assert ids == list(range(SLOW_READER_REQUESTS))
    finally:
        channel.close()


FLOOD_RESPONSES = 400  # 100 MiB of 256 KiB responses, against a 1 MiB buffer


def test_a_decoupled_request_whose_client_stops_reading_is_cancelled_past_the_buffer(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """One request of a model that streams without pause, from a client that reads nothing:
    pausing the client's requests does not bound it, so past the buffer the request is
    cancelled (its model sees is_cancelled()) and ends with an error, in band, after the
    responses that were waiting. Other clients are served meanwhile."""
    repository = make_repository(
        tmp_path / "repo",
        {
            "flood_decoupled": TEST_MODELS / "flood_decoupled",
            "identity_fp32": EXAMPLE_MODELS / "identity_fp32",
        },
    )
    daemon = start_daemon(
        repository,
        "--grpc-stream-buffer-bytes", str(1 << 20),
        settle=["flood_decoupled", "identity_fp32"],
    )  # fmt: skip
    where = tmp_path / "probe"
    where.mkdir()
    request = _flood_request(FLOOD_RESPONSES, RESPONSE_FLOATS, where)
    done = threading.Event()

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        yield request
        done.wait(120)  # the stream stays open (no half-close) while nothing is read

    channel = grpc.insecure_channel(daemon.url, options=[("grpc.max_receive_message_length", -1)])
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), timeout=120)  # nothing read yet
        record = where / "sent-1"
        wait_until(record.exists, SETTLE_TIMEOUT_S, "the model to stop sending")
        sent, state = record.read_text().split()
        assert state == "cancelled" and int(sent) < FLOOD_RESPONSES // 2, (sent, state)
        other = daemon.client().infer(
            "identity_fp32", [infer_input("INPUT0", np.ones((1, 4), np.float32), "FP32")]
        )
        assert other.as_numpy("OUTPUT0").tolist() == [[1.0] * 4]
        # Now the client reads: the responses that waited, in order, then the error.
        values = []
        for response in call:
            if response.error_message:
                error = response.error_message
                break
            raw = response.infer_response.raw_output_contents[0]
            values.append(int(np.frombuffer(raw[:4], np.float32)[0]))
        done.set()
        call.cancel()
        assert values == list(range(len(values))) and 0 < len(values) <= int(sent)
        assert "the client reads too slowly" in error, error
        assert f"past the limit of {1 << 20} (--grpc-stream-buffer-bytes)" in error, error
        assert "the request was cancelled" in error, error
    finally:
        done.set()
        channel.close()


def _flood_request(count: int, floats: int, where: Path) -> service_pb2.ModelInferRequest:
    """flood_decoupled's request 1: ``count`` responses of ``floats`` floats, as fast as it
    can; it records in ``where``/sent-1 how many it sent and whether it was cancelled."""
    request = service_pb2.ModelInferRequest(model_name="flood_decoupled", id="flood")
    for name, value in (("ID", 1), ("COUNT", count), ("FLOATS", floats)):
        request.inputs.add(name=name, datatype="INT32", shape=[1])
        request.raw_input_contents.append(np.array([value], np.int32).tobytes())
    request.inputs.add(name="DIR", datatype="BYTES", shape=[1])
    text = str(where).encode()
    request.raw_input_contents.append(len(text).to_bytes(4, "little") + text)
    return request


SMALL_FLOOD = 1_000_000  # responses of one float (about 95 bytes each on the wire)
# What the daemon, its front ends and its worker may grow by, all together, while a client
# that reads nothing holds the default buffer (16 MiB) of such responses twice (in the
# call's HTTP/2 stream and in its session): generous, and the same for any count.
SMALL_FLOOD_MARGIN = 96 * MIB


@pytest.mark.parametrize("fronts", ["1", "2"])
def test_a_flood_of_small_responses_to_a_stream_that_never_reads_is_bounded_and_cancelled(
    start_daemon: DaemonFactory, tmp_path: Path, fronts: str
) -> None:
    """Issue 51, item 2: a raw HTTP/2 client opens ModelStreamInfer with a window of 0 and
    never reads; one request asks for a million small responses. Counted at their bytes
    alone, a buffer of 16 MiB held some 350,000 of them (170 MB in the daemon's objects) and
    the processes grew with the count. Each response counts its overhead too: the request is
    cancelled (the model sees is_cancelled()) long before its end, the memory of every pbd
    process stays within a margin that does not depend on the count, and once the client
    reads, the responses that waited come, then the error, in band."""
    repository = make_repository(
        tmp_path / "repo", {"flood_decoupled": TEST_MODELS / "flood_decoupled"}
    )
    daemon = start_daemon(repository, "--frontends", fronts, settle=["flood_decoupled"])
    where = tmp_path / "probe"
    where.mkdir()
    body = _flood_request(SMALL_FLOOD, 1, where).SerializeToString()

    def memory() -> int:
        return sum(rss_anon_bytes(pid) for pid in daemon.processes())

    before = memory()
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        sock.settimeout(STREAM_TIMEOUT_S)
        fields = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/inference.GRPCInferenceService/ModelStreamInfer"),
            (b":authority", b"pbd"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        sock.sendall(
            f.PREFACE
            + f.settings({f.INITIAL_WINDOW_SIZE: 0})  # no DATA may come to us
            + f.SETTINGS_ACK
            + f.frame(f.HEADERS, f.END_HEADERS, 1, Encoder().encode(fields))
            + f.frame(f.DATA, 0, 1, b"\0" + len(body).to_bytes(4, "big") + body)
        )
        record = where / "sent-1"
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        grown = 0
        while not record.exists():
            grown = max(grown, memory() - before)
            assert grown < SMALL_FLOOD_MARGIN, f"pbd's processes grew by {grown / MIB:.0f} MiB"
            assert time.monotonic() < deadline, "the flood was not cancelled"
            time.sleep(0.5)
        sent, state = record.read_text().split()
        assert state == "cancelled" and int(sent) < SMALL_FLOOD // 4, (sent, state)
        grown = max(grown, memory() - before)
        assert grown < SMALL_FLOOD_MARGIN, f"pbd's processes grew by {grown / MIB:.0f} MiB"
        print(f"--frontends {fronts}: cancelled after {sent} responses, grew {grown / MIB:.0f} MiB")
        # Now the client reads: every response that waited, in order, then the error.
        sock.sendall(
            f.settings({f.INITIAL_WINDOW_SIZE: f.MAX_WINDOW})
            + f.window_update(0, f.MAX_WINDOW - f.DEFAULT_WINDOW)
        )
        values, error = _read_stream(sock)
    assert values == list(range(len(values))) and 0 < len(values) <= int(sent)
    assert "the client reads too slowly" in error, error
    assert "(--grpc-stream-buffer-bytes); the request was cancelled" in error, error


def _read_stream(sock: socket.socket) -> tuple[list[int], str]:
    """Read stream 1's responses up to its first in-band error: each response's first OUT
    value, and the error."""
    data = bytearray()
    values: list[int] = []
    while True:
        head = _read_exactly(sock, f.HEADER_SIZE)
        high, low, kind, _, stream_id = f.HEADER.unpack(head)
        payload = _read_exactly(sock, high << 16 | low)
        if kind != f.DATA or stream_id != 1:
            continue
        data += payload
        while len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[1:5], "big"):
            end = 5 + int.from_bytes(data[1:5], "big")
            response = service_pb2.ModelStreamInferResponse.FromString(bytes(data[5:end]))
            del data[:end]
            if response.error_message:
                return values, response.error_message
            raw = response.infer_response.raw_output_contents[0]
            values.append(int(np.frombuffer(raw[:4], np.float32)[0]))


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    parts = bytearray()
    while len(parts) < n:
        chunk = sock.recv(n - len(parts))
        assert chunk, "the server closed the connection"
        parts += chunk
    return bytes(parts)


def _steady(count: Callable[[], int]) -> Callable[[], int | None]:
    """A predicate: the count once two looks 0.5 s apart agree (None before)."""
    last = [-1]

    def check() -> int | None:
        now = count()
        same, last[0] = now == last[0], now
        if same:
            return now
        time.sleep(0.5)
        return None

    return check
