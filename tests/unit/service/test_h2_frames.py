"""pbd.h2.frames: the frames the server sends, read back by layout and by hpack's decoder."""

from __future__ import annotations

import struct

from hpack import Decoder as HpackDecoder
from hpack.hpack import encode_integer
from hypothesis import given
from hypothesis import strategies as st

from pbd.h2 import frames as f


def _parse(wire: bytes) -> list[tuple[int, int, int, bytes]]:
    out = []
    while wire:
        high, low, kind, flags, stream = f.HEADER.unpack_from(wire)
        end = f.HEADER_SIZE + (high << 16 | low)
        out.append((kind, flags, stream, wire[f.HEADER_SIZE : end]))
        wire = wire[end:]
    return out


@given(st.integers(0, 2**32), st.integers(1, 8), st.integers(0, 255))
def test_hpack_int_matches_hpack(value: int, prefix_bits: int, first: int) -> None:
    high = first & ~((1 << prefix_bits) - 1) & 0xFF
    expected = bytearray(encode_integer(value, prefix_bits))
    expected[0] |= high
    assert f.hpack_int(value, prefix_bits, high) == bytes(expected)


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.binary(max_size=300))))
def test_header_blocks_decode_with_hpack(fields: list[tuple[bytes, bytes]]) -> None:
    decoded = HpackDecoder().decode(f.header_block(fields), raw=True)
    assert [(bytes(n), bytes(v)) for n, v in decoded] == fields


def test_frame_layout() -> None:
    payload = b"p" * 70_000  # a length above 16 bits
    assert _parse(f.frame(f.DATA, f.END_STREAM, 2**31 - 1, payload)) == [
        (f.DATA, f.END_STREAM, 2**31 - 1, payload)
    ]
    assert f.frame_header(f.DATA, 0, 3, 70_000) == f.frame(f.DATA, 0, 3, payload)[:9]


def test_control_frames() -> None:
    assert _parse(f.settings({f.INITIAL_WINDOW_SIZE: 7, f.MAX_FRAME_SIZE: 20_000})) == [
        (f.SETTINGS, 0, 0, struct.pack(">HIHI", 4, 7, 5, 20_000))
    ]
    assert _parse(f.SETTINGS_ACK) == [(f.SETTINGS, f.ACK, 0, b"")]
    assert _parse(f.window_update(5, 1000)) == [(f.WINDOW_UPDATE, 0, 5, struct.pack(">I", 1000))]
    assert _parse(f.rst_stream(5, f.CANCEL)) == [(f.RST_STREAM, 0, 5, struct.pack(">I", 8))]
    assert _parse(f.goaway(9, f.PROTOCOL_ERROR, b"why")) == [
        (f.GOAWAY, 0, 0, struct.pack(">II", 9, 1) + b"why")
    ]
    assert _parse(f.ping_ack(b"12345678")) == [(f.PING, f.ACK, 0, b"12345678")]


@given(st.integers(0, 60_000), st.sampled_from([16_384, 20_000, 50_000]), st.booleans())
def test_headers_split_into_continuation_at_the_peer_frame_size(
    size: int, max_frame: int, end: bool
) -> None:
    block = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    frames = _parse(f.headers(7, block, end, max_frame))
    assert b"".join(p for _, _, _, p in frames) == block
    assert all(len(p) <= max_frame for _, _, _, p in frames)
    assert frames[0][0] == f.HEADERS and all(k == f.CONTINUATION for k, *_ in frames[1:])
    assert bool(frames[0][1] & f.END_STREAM) == end
    assert [bool(flags & f.END_HEADERS) for _, flags, _, _ in frames] == [False] * (
        len(frames) - 1
    ) + [True]
