"""What parsing a gRPC client's requests costs pbd's own HTTP/2 core against libnghttp2 bound
with ctypes, in one run (docs/transport.md, "Why pbd speaks HTTP/2 itself").

    python -m bench.h2_engines [--requests 20000]

The same bytes go to each: the preface, then unary calls as a grpc client sends them (HEADERS
with the request's fields, repeated through the HPACK dynamic table, and one DATA frame with a
125-byte message), cut into 16 KiB reads. Reported per request: libnghttp2 with no Python
callback (the C parser alone), with a no-op Python callback for each event nghttp2 reports
(begin of headers, each header field, each frame, each DATA chunk: 12 per request), with
callbacks that do the least a server must (take each field's bytes, the stream id), and
pbd.h2's core with an application that records each stream. Without a system libnghttp2
(``libnghttp2.so.14``) only pbd's line is printed.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import struct
import sys
import time
from collections.abc import Callable

from hpack import Encoder

from pbd.h2 import frames as f
from pbd.h2.core import Core
from pbd.h2.header_blocks import Fields
from pbd.h2.limits import Limits
from pbd.h2.sending import Stream

READ = 16 * 1024
FIELDS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"127.0.0.1:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    (b"user-agent", b"grpc-python/1.85.3 grpc-c/48.0.0 (linux; chttp2)"),
]


def wire(requests: int) -> list[bytes]:
    encoder = Encoder()
    message = b"\x00" + struct.pack(">I", 120) + b"x" * 120
    parts = [f.PREFACE, f.settings({})]
    for i in range(requests):
        stream = 1 + 2 * i
        parts.append(f.frame(f.HEADERS, f.END_HEADERS, stream, encoder.encode(FIELDS)))
        parts.append(f.frame(f.DATA, f.END_STREAM, stream, message))
    data = b"".join(parts)
    return [data[i : i + READ] for i in range(0, len(data), READ)]


# -- pbd.h2 ----------------------------------------------------------------------------------


class _Handler:
    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False

    def on_data(self, chunk: memoryview, end: bool) -> None:
        self.ended = end

    def room(self) -> memoryview | None:
        return None

    def wrote(self, n: int, end: bool) -> None:
        raise AssertionError

    def on_reset(self) -> None:
        pass


class _App:
    def open(self, stream: Stream, headers: Fields) -> _Handler:
        return _Handler()

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        raise AssertionError


def pbd_core(reads: list[bytes], requests: int) -> float:
    core = Core(_App(), Limits(max_streams=requests + 1))
    core.data_to_send()
    began = time.perf_counter()
    for data in reads:
        core.receive(data)
        core.data_to_send()
    elapsed = time.perf_counter() - began
    assert len(core.streams) == requests and core.error is None
    return elapsed


# -- libnghttp2 through ctypes ---------------------------------------------------------------

VOID = ctypes.c_void_p
SEND = ctypes.CFUNCTYPE(ctypes.c_ssize_t, VOID, VOID, ctypes.c_size_t, ctypes.c_int, VOID)
FRAME = ctypes.CFUNCTYPE(ctypes.c_int, VOID, VOID, VOID)
HEADER = ctypes.CFUNCTYPE(
    ctypes.c_int, VOID, VOID, VOID, ctypes.c_size_t, VOID, ctypes.c_size_t, ctypes.c_uint8, VOID
)
# nghttp2 ends each field's name and value with a NUL: as c_char_p, ctypes makes the bytes.
HEADER_BYTES = ctypes.CFUNCTYPE(
    ctypes.c_int,
    VOID,
    VOID,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_uint8,
    VOID,
)
CHUNK = ctypes.CFUNCTYPE(
    ctypes.c_int, VOID, ctypes.c_uint8, ctypes.c_int32, VOID, ctypes.c_size_t, VOID
)


class FrameHead(ctypes.Structure):  # nghttp2_frame_hd, the start of every nghttp2_frame
    _fields_ = [
        ("length", ctypes.c_size_t),
        ("stream_id", ctypes.c_int32),
        ("type", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
    ]


def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libnghttp2.so.14")
    except OSError:
        return None
    lib.nghttp2_session_mem_recv.restype = ctypes.c_ssize_t
    lib.nghttp2_session_mem_recv.argtypes = [VOID, ctypes.c_char_p, ctypes.c_size_t]
    return lib


def _sent(session: object, data: object, length: int, flags: int, user: object) -> int:
    return length


def nghttp2(lib: ctypes.CDLL, reads: list[bytes], callbacks: str) -> tuple[float, int]:
    """Seconds to take ``reads``, and how many Python callbacks that made."""
    count = [0]

    def noop(*args: object) -> int:
        count[0] += 1
        return 0

    fields: dict[int, list[tuple[bytes, bytes]]] = {}
    current: list[list[tuple[bytes, bytes]]] = [[]]

    def begin(session: object, frame: int, user: object) -> int:
        count[0] += 1  # a block's fields come one after another: its stream id is read once
        current[0] = fields[FrameHead.from_address(frame).stream_id] = []
        return 0

    def header(
        session: object, frame: int, name: bytes, nlen: int, value: bytes, *rest: object
    ) -> int:
        count[0] += 1
        current[0].append((name, value))
        return 0

    keep: list[object] = [SEND(_sent)]
    table = ctypes.c_void_p()
    lib.nghttp2_session_callbacks_new(ctypes.byref(table))
    lib.nghttp2_session_callbacks_set_send_callback(table, keep[0])
    if callbacks != "none":
        setters: list[tuple[str, object]] = [
            ("on_frame_recv", FRAME(noop)),
            ("on_begin_headers", FRAME(begin if callbacks == "work" else noop)),
            ("on_header", HEADER_BYTES(header) if callbacks == "work" else HEADER(noop)),
            ("on_data_chunk_recv", CHUNK(noop)),
        ]
        for name, callback in setters:
            keep.append(callback)
            getattr(lib, f"nghttp2_session_callbacks_set_{name}_callback")(table, callback)
    session = ctypes.c_void_p()
    assert lib.nghttp2_session_server_new(ctypes.byref(session), table, None) == 0
    began = time.perf_counter()
    for data in reads:
        assert lib.nghttp2_session_mem_recv(session, data, len(data)) == len(data)
        lib.nghttp2_session_send(session)
    elapsed = time.perf_counter() - began
    lib.nghttp2_session_del(session)
    lib.nghttp2_session_callbacks_del(table)
    return elapsed, count[0]


def best(run: Callable[[], float], times: int = 3) -> float:
    return min(run() for _ in range(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.h2_engines", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    opts = parser.parse_args(argv)
    n = opts.requests
    reads = wire(n)
    lib = _library()
    if lib is not None:
        for callbacks, label in (
            ("none", "libnghttp2 (ctypes), no Python callback"),
            ("noop", "libnghttp2 (ctypes), no-op Python callbacks"),
            ("work", "libnghttp2 (ctypes), callbacks taking the fields"),
        ):
            calls = nghttp2(lib, reads, callbacks)[1]
            seconds = best(lambda c=callbacks: nghttp2(lib, reads, c)[0])  # type: ignore[misc]
            print(f"{label:52s} {seconds / n * 1e6:6.2f} µs/request ({calls / n:.0f} callbacks)")
    else:
        print("libnghttp2.so.14 not found: pbd.h2 alone")
    seconds = best(lambda: pbd_core(reads, n))
    print(f"{'pbd.h2 core (Python, per stream event)':52s} {seconds / n * 1e6:6.2f} µs/request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
