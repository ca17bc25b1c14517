"""pbd.h2.core without I/O: bytes in, stream events and bytes out. Receive windows credited as
the application takes the data, grpc core's ping policy, what counts as a rapid reset, and
control frames that cost O(1) while answers wait (wire-level rules: tests/conformance)."""

from __future__ import annotations

import struct

from hpack import Encoder

from pbd.h2 import frames as f
from pbd.h2.core import Core
from pbd.h2.header_blocks import Fields
from pbd.h2.limits import Limits, Rate
from pbd.h2.sending import Stream

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/t/Echo"),
    (b"content-type", b"application/grpc"),
]
HANDSHAKE = f.PREFACE + f.settings({}) + f.SETTINGS_ACK


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Handler:
    def __init__(self, app: App, stream: Stream) -> None:
        self.app = app
        self.stream = stream
        self.data = bytearray()
        self.reset = False

    def on_data(self, chunk: memoryview, end: bool) -> None:
        self.data += chunk
        if self.app.hold:
            self.stream.hold()
        if end and self.app.answer is not None:
            self.stream.send_headers((None, f.literal(b":status", b"200")))
            self.stream.send_data(b"a" * self.app.answer, True)

    def room(self) -> memoryview | None:
        return None

    def wrote(self, n: int, end: bool) -> None:
        raise AssertionError

    def on_reset(self) -> None:
        self.reset = True


class App:
    def __init__(self, answer: int | None = None, hold: bool = False) -> None:
        self.answer = answer
        self.hold = hold
        self.handlers: dict[int, Handler] = {}

    def open(self, stream: Stream, headers: Fields) -> Handler:
        handler = self.handlers[stream.id] = Handler(self, stream)
        return handler

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        raise AssertionError


def frames(data: bytes | memoryview) -> list[tuple[int, int, int, bytes]]:
    out, pos, data = [], 0, bytes(data)
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big")
        out.append((kind, flags, stream, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


def started(app: App, limits: Limits | None = None, clock: Clock | None = None) -> Core:
    core = Core(app, limits or Limits(), clock or Clock())
    core.receive(HANDSHAKE)
    core.data_to_send()
    return core


def headers(stream: int, end: bool = False) -> bytes:
    block = b"".join(f.literal(n, v) for n, v in REQUEST)
    return f.frame(f.HEADERS, f.END_HEADERS | (f.END_STREAM if end else 0), stream, block)


def updates(output: bytes | memoryview) -> dict[int, int]:
    return {
        stream: int.from_bytes(payload, "big")
        for kind, _, stream, payload in frames(output)
        if kind == f.WINDOW_UPDATE
    }


# -- receive windows ---------------------------------------------------------------------------


def test_windows_are_credited_as_data_is_taken_and_held_data_waits() -> None:
    app = App(hold=True)
    limits = Limits(stream_window=100_000, connection_window=400_000)
    core = started(app, limits)
    core.receive(headers(1) + f.frame(f.DATA, 0, 1, bytes(60_000)))
    assert updates(core.data_to_send()) == {}  # held: nothing granted back
    app.hold = False
    app.handlers[1].stream.release()
    assert updates(core.data_to_send()) == {1: 60_000}  # half a stream window and more owed
    core.receive(f.frame(f.DATA, 0, 1, bytes(100_000)))  # the window is 100,000 again
    assert updates(core.data_to_send()) == {1: 100_000}
    core.receive(f.frame(f.DATA, 0, 1, bytes(50_000)))
    assert updates(core.data_to_send()) == {1: 50_000, 0: 210_000}


def test_the_client_is_held_to_the_window_it_was_given() -> None:
    app = App(hold=True)
    core = started(app, Limits(stream_window=100_000))
    core.receive(headers(1) + f.frame(f.DATA, 0, 1, bytes(100_000)))
    core.receive(f.frame(f.DATA, 0, 1, b"x"))
    assert [(k, s, p) for k, _, s, p in frames(core.data_to_send())] == [
        (f.RST_STREAM, 1, struct.pack(">I", f.FLOW_CONTROL_ERROR))
    ]
    assert app.handlers[1].reset


def test_until_the_settings_are_acked_streams_have_the_default_window() -> None:
    core = Core(App(), Limits(), Clock())
    core.receive(f.PREFACE + f.settings({}) + headers(1))
    core.receive(f.frame(f.DATA, 0, 1, bytes(f.DEFAULT_WINDOW)))
    core.receive(f.SETTINGS_ACK)  # now the advertised 16 MiB
    core.receive(f.frame(f.DATA, 0, 1, bytes(100_000)))
    assert core.error is None and f.RST_STREAM not in [x[0] for x in frames(core.data_to_send())]


def test_data_dropped_on_a_reset_stream_is_credited_to_the_connection() -> None:
    core = started(App(), Limits(connection_window=200_000))
    core.receive(headers(1) + f.rst_stream(1, f.CANCEL))
    core.receive(f.frame(f.DATA, 0, 1, bytes(60_000)))  # in flight when the client reset
    core.receive(f.frame(f.DATA, 0, 1, bytes(60_000)))
    assert updates(core.data_to_send()) == {0: 120_000}


# -- ping policy -------------------------------------------------------------------------------


def _pings(core: Core, clock: Clock, n: int, every: float) -> None:
    for i in range(n):
        core.receive(f.frame(f.PING, 0, 0, struct.pack(">Q", i)))
        clock.now += every


def test_pings_too_often_while_nothing_is_answered_end_the_connection() -> None:
    clock = Clock()
    core = started(App(), Limits(), clock)
    _pings(core, clock, 3, 1.0)  # one is free, two strikes are allowed
    assert core.error is None
    _pings(core, clock, 1, 1.0)
    assert core.error is not None and core.error.code == f.ENHANCE_YOUR_CALM
    assert frames(core.data_to_send())[-1][3].endswith(b"too_many_pings")


def test_pings_while_answers_flow_are_no_strikes() -> None:
    clock = Clock()
    app = App(answer=10)
    core = started(app, Limits(), clock)
    for stream in range(1, 200, 2):
        core.receive(headers(stream, end=True) + f.frame(f.PING, 0, 0, bytes(8)))
    assert core.error is None


def test_pings_at_the_allowed_interval_and_no_policing() -> None:
    clock = Clock()
    core = started(App(), Limits(min_ping_interval=10.0, pings_without_calls=True), clock)
    _pings(core, clock, 20, 10.0)
    assert core.error is None
    core = started(App(), Limits(max_ping_strikes=0), clock)
    _pings(core, clock, 1000, 0.0)
    assert core.error is None


def test_with_no_call_open_pings_must_be_two_hours_apart() -> None:
    clock = Clock()
    core = started(App(), Limits(min_ping_interval=10.0), clock)
    _pings(core, clock, 4, 60.0)
    assert core.error is not None


# -- rapid reset -------------------------------------------------------------------------------


def test_a_reset_in_the_read_that_opened_the_stream_counts() -> None:
    core = started(App(), Limits(reset_rate=Rate(3, 10.0)))
    for stream in (1, 3, 5):
        core.receive(headers(stream) + f.rst_stream(stream, f.CANCEL))
    assert core.error is None
    core.receive(headers(7) + f.rst_stream(7, f.CANCEL))
    assert core.error is not None and "rapid reset" in str(core.error)


def test_a_call_given_up_on_after_its_request_ended_is_not_counted() -> None:
    """A client whose deadline passes resets calls it waited for: no flood."""
    core = started(App(), Limits(reset_rate=Rate(3, 10.0)))
    for stream in range(1, 100, 2):
        core.receive(headers(stream, end=True))
        core.receive(f.rst_stream(stream, f.CANCEL))
    assert core.error is None


def test_a_reset_before_the_request_ended_counts_in_any_read() -> None:
    core = started(App(), Limits(reset_rate=Rate(3, 10.0)))
    for stream in (1, 3, 5, 7):
        core.receive(headers(stream))
        core.receive(f.rst_stream(stream, f.CANCEL))
    assert core.error is not None


# -- O(1) control frames while answers wait -------------------------------------------------


def test_settings_that_grow_no_window_leave_waiting_streams_alone() -> None:
    app = App(answer=100)
    core = Core(app, Limits(), Clock())
    core.receive(f.PREFACE + f.settings({f.INITIAL_WINDOW_SIZE: 0}) + f.SETTINGS_ACK)
    core.receive(f.window_update(0, 1 << 20))
    core.receive(b"".join(headers(s, end=True) for s in range(1, 2000, 2)))
    core.data_to_send()
    assert len(core.waiting) == 1000
    for _ in range(50):
        core.receive(f.settings({f.INITIAL_WINDOW_SIZE: 0}))
    assert [x[:2] for x in frames(core.data_to_send())] == [(f.SETTINGS, f.ACK)] * 50
    core.receive(f.settings({f.INITIAL_WINDOW_SIZE: 100}))  # grows them all: all are sent
    assert sum(1 for x in frames(core.data_to_send()) if x[0] == f.DATA) == 1000
    assert core.streams == {}


def test_a_connection_window_update_resumes_only_the_streams_it_has_room_for() -> None:
    app = App(answer=100)
    core = Core(app, Limits(), Clock())
    core.receive(HANDSHAKE)
    core.receive(b"".join(headers(s, end=True) for s in range(1, 2 * 700, 2)))  # 70,000 bytes
    core.data_to_send()
    assert core.send_window <= 0 and len(core.stalled) > 40
    stalled = len(core.stalled)
    core.receive(f.window_update(0, 150))
    sent = [x for x in frames(core.data_to_send()) if x[0] == f.DATA]
    assert sum(len(x[3]) for x in sent) == 150 and len(core.stalled) >= stalled - 2


def test_the_servers_settings_advertise_the_limits() -> None:
    core = Core(App(), Limits(max_header_list=1234), Clock())
    (kind, _, _, payload), update = frames(core.data_to_send())
    values = dict(struct.iter_unpack(">HI", payload))
    assert kind == f.SETTINGS and values[f.MAX_HEADER_LIST_SIZE] == 1234
    assert values[f.ENABLE_PUSH] == 0 and update[0] == f.WINDOW_UPDATE


def test_a_header_list_encoded_with_the_table_is_decoded_once_per_block() -> None:
    core = started(App())
    encoder = Encoder()
    for stream in range(1, 20, 2):
        core.receive(
            f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, stream, encoder.encode(REQUEST))
        )
    assert len(core.decoder.cache) <= 2


# -- what a connection keeps ----------------------------------------------------------------------


def test_frames_the_server_ignores_or_refuses_are_never_kept_whole() -> None:
    """A client announcing a frame of a megabyte it never finishes makes the server hold
    nothing of it: an unknown frame type and padding are skipped as they come, a field block
    past the limit is refused at its frame header."""
    core = started(App())
    core.receive(f.frame_header(0x42, 0, 1, 1 << 20) + bytes(1000))
    assert len(core.partial) == 0 and core.skip_left == (1 << 20) - 1000
    core.receive(bytes((1 << 20) - 1000) + headers(1))
    assert core.error is None and core.skip_left == 0 and 1 in core.streams
    core.receive(f.frame_header(f.HEADERS, 0, 3, 100_000))
    assert core.error is not None and core.error.code == f.ENHANCE_YOUR_CALM


def test_padded_data_split_anywhere_gives_its_data_and_skips_its_padding() -> None:
    payload = bytes([200]) + b"data" * 50 + bytes(200)
    wire = headers(1) + f.frame(f.DATA, f.PADDED | f.END_STREAM, 1, payload)
    for cut in (9 + 30, len(headers(1)) + 5, len(headers(1)) + 9, len(headers(1)) + 10, 400):
        app = App()
        core = started(app)
        core.receive(wire[:cut])
        if cut >= len(headers(1)):  # inside the DATA frame: at most its header and pad length
            assert len(core.partial) <= f.HEADER_SIZE + 1
        core.receive(wire[cut:])
        assert bytes(app.handlers[1].data) == b"data" * 50 and core.error is None


def test_a_control_frame_of_the_wrong_length_is_refused_before_it_is_kept() -> None:
    core = started(App())
    core.receive(f.frame_header(f.PING, 0, 0, 64 * 1024))
    assert core.error is not None and core.error.code == f.FRAME_SIZE_ERROR
    core = started(App())
    core.receive(f.frame_header(f.SETTINGS, 0, 0, 6 * 1000))
    assert core.error is not None and core.error.code == f.ENHANCE_YOUR_CALM
