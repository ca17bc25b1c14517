"""pbd.h2's core on random client frames: mostly well-formed frame layouts of every type, with
random flags, stream ids and payloads (padding lengths that lie, field blocks of random
bytes, settings of any value), then a few bytes that may lie about the next frame."""

from __future__ import annotations

import struct

from fuzz_oracles import check_h2_frames, tally
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from pbd.h2 import frames as f

EXAMPLES = 300

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/t/Echo"),
    (b"content-type", b"application/grpc"),
]
streams = st.sampled_from([0, 1, 1, 3, 3, 5, 2, 0x7FFFFFFF])
kinds = st.sampled_from(list(range(10))) | st.integers(0, 255)
flag_sets = st.sampled_from([0, 1, 4, 5, 8, 9, 0x20, 0x25, 0x2D]) | st.integers(0, 255)
blocks = st.one_of(
    st.just(Encoder().encode(REQUEST)),
    st.lists(
        st.tuples(st.sampled_from([b"x-a", b"X-B", b"te", b":path"]), st.binary(max_size=8))
    ).map(lambda fields: Encoder().encode(REQUEST + fields)),
    st.binary(max_size=40),
)
payloads = st.one_of(
    st.binary(max_size=64),
    blocks,
    st.tuples(st.sampled_from([1, 2, 3, 4, 5, 6, 0x99]), st.integers(0, 2**32 - 1)).map(
        lambda kv: struct.pack(">HI", *kv)
    ),
    st.integers(0, 2**32 - 1).map(lambda n: struct.pack(">I", n)),
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind, flags, stream, payload = draw(kinds), draw(flag_sets), draw(streams), draw(payloads)
    if kind == f.HEADERS and draw(st.booleans()):
        flags |= f.END_HEADERS
    return f.frame(kind, flags, stream, payload)


@settings(max_examples=EXAMPLES)
@given(st.lists(frames(), max_size=12), st.binary(max_size=12))
def test_fuzz_h2_frames(sequence: list[bytes], tail: bytes) -> None:
    tally("h2_frames (hypothesis)", check_h2_frames(b"".join(sequence) + tail))
