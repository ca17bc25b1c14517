from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from pbd_wire.framing import (
    HEADER,
    MAX_FRAME_BYTES,
    FrameError,
    FrameSplitter,
    SocketFrameReader,
    decode_length,
    encode_frame,
    read_frame,
    socket_address,
)


def test_frames_round_trip_over_a_socket_in_pieces():
    a, b = socket.socketpair()
    payloads = [b"", b"x", bytes(range(256)) * 1000]
    data = b"".join(encode_frame(p) for p in payloads)

    def write() -> None:
        for i in range(0, len(data), 777):  # deliver in odd-sized chunks
            a.sendall(data[i : i + 777])
        a.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reader = SocketFrameReader(b)
        assert [reader.read() for _ in payloads] == payloads
        assert reader.read() is None
    finally:
        writer.join()
        b.close()


def test_truncated_frame_is_an_error_not_eof():
    a, b = socket.socketpair()
    a.sendall(encode_frame(b"hello")[:-2])
    a.close()
    try:
        with pytest.raises(FrameError):
            SocketFrameReader(b).read()
    finally:
        b.close()


def test_oversized_length_is_refused():
    with pytest.raises(FrameError):
        decode_length(HEADER.pack(MAX_FRAME_BYTES + 1))


def test_async_reader():
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(encode_frame(b"abc") + encode_frame(b"de"))
        reader.feed_eof()
        return [await read_frame(reader), await read_frame(reader), await read_frame(reader)]

    assert asyncio.run(go()) == [b"abc", b"de", None]


def test_abstract_socket_names():
    assert socket_address("@pbd-1") == b"\0pbd-1"
    assert socket_address("/run/pbd/w.sock") == "/run/pbd/w.sock"


def test_a_splitter_gives_whole_frames_and_keeps_a_partial_one_for_the_next_read() -> None:
    splitter = FrameSplitter()
    stream = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three")
    assert splitter.split(stream[:2]) == []  # not even a header
    assert splitter.split(stream[2:9]) == [b"one"]
    assert splitter.split(stream[9:-1]) == [b""]
    assert splitter.split(stream[-1:]) == [b"three"]
    assert splitter.split(b"") == []


def test_a_frame_alone_in_a_read_is_its_payload_and_what_follows_starts_afresh() -> None:
    splitter = FrameSplitter()
    assert splitter.split(encode_frame(b"alone")) == [b"alone"]
    stream = encode_frame(b"next") + encode_frame(b"after")
    assert splitter.split(stream[:5]) == []  # the header and a byte: kept
    assert splitter.split(stream[5:]) == [b"next", b"after"]
    assert splitter.split(encode_frame(b"")) == [b""]


def test_a_splitter_fed_views_of_one_reused_buffer_keeps_its_partial_frame_intact() -> None:
    # As the worker reads its front links: every read lands in the same buffer.
    reads = memoryview(bytearray(64))
    splitter = FrameSplitter()
    stream = encode_frame(b"first") + encode_frame(b"second")
    cut = len(encode_frame(b"first")) + 3
    reads[:cut] = stream[:cut]
    assert [bytes(f) for f in splitter.split(reads[:cut])] == [b"first"]
    reads[:] = b"\xff" * 64  # the next read overwrites the buffer
    rest = len(stream) - cut
    reads[:rest] = stream[cut:]
    assert [bytes(f) for f in splitter.split(reads[:rest])] == [b"second"]
    alone = encode_frame(b"alone")
    reads[: len(alone)] = alone
    (frame,) = splitter.split(reads[: len(alone)])
    assert bytes(frame) == b"alone"  # a view of the buffer: valid until the next read


def test_a_splitter_refuses_a_length_no_frame_may_have() -> None:
    with pytest.raises(FrameError, match="exceeds"):
        FrameSplitter().split(HEADER.pack(MAX_FRAME_BYTES + 1))


def test_frames_that_arrive_together_are_read_one_by_one() -> None:
    a, b = socket.socketpair()
    try:
        a.sendall(encode_frame(b"one") + encode_frame(b"two"))
        a.sendall(encode_frame(b"three"))  # a frame alone after them
        reader = SocketFrameReader(b)
        assert reader.read() == b"one" and reader.buffered()
        assert reader.read() == b"two"
        assert reader.read() == b"three" and not reader.buffered()
    finally:
        a.close()
        b.close()


def test_a_frame_alone_in_one_read_is_returned_whole_and_an_oversized_one_refused() -> None:
    a, b = socket.socketpair()
    try:
        reader = SocketFrameReader(b)
        a.sendall(encode_frame(b""))
        assert reader.read() == b"" and not reader.buffered()
        a.sendall(HEADER.pack(MAX_FRAME_BYTES + 1))
        with pytest.raises(FrameError):
            reader.read()
    finally:
        a.close()
        b.close()
