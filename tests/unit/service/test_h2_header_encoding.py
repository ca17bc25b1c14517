"""pbd.h2.header_encoding against python-hyper's HPACK decoder: the server's blocks decode, in
order, to the lists it meant, whatever table size the client allows; fixed lists shrink to
one byte per field once indexed."""

from __future__ import annotations

from hpack import Decoder
from hypothesis import given
from hypothesis import strategies as st

from pbd.h2.frames import literal
from pbd.h2.header_encoding import Block, Encoder, Fixed

HEAD = Fixed(
    [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    ]
)
OK = Fixed([(b"grpc-status", b"0")])
BOTH = Fixed([*HEAD.fields, *OK.fields])
ERROR = literal(b"grpc-status", b"13") + literal(b"grpc-message", b"broken")
BLOCKS: list[Block] = [(HEAD, b""), (OK, b""), (BOTH, b""), (HEAD, ERROR), (None, ERROR)]


def _fields(block: Block) -> list[tuple[bytes, bytes]]:
    fixed, tail = block
    listed = list(fixed.fields) if fixed is not None else []
    if tail:
        listed += [(b"grpc-status", b"13"), (b"grpc-message", b"broken")]
    return listed


def _decoded(decoder: Decoder, data: bytes) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in decoder.decode(data, raw=True)]


def test_a_fixed_list_is_indexed_once_then_one_byte_per_field() -> None:
    encoder, decoder = Encoder(), Decoder()
    first = encoder.encode((HEAD, b""))
    assert _decoded(decoder, first) == list(HEAD.fields)
    again = encoder.encode((HEAD, b""))
    assert len(again) == 3 and _decoded(decoder, again) == list(HEAD.fields)
    assert encoder.encode((HEAD, b"")) is again  # cached while the table holds


@given(
    st.lists(st.sampled_from(range(len(BLOCKS))), max_size=30),
    st.sampled_from([None, 0, 50, 100, 200, 4096]),
)
def test_blocks_decode_in_order_whatever_the_table_size(
    order: list[int], limit: int | None
) -> None:
    encoder, decoder = Encoder(), Decoder()
    for i, index in enumerate(order):
        if limit is not None and i == len(order) // 2:
            encoder.resize(limit)  # the client's SETTINGS_HEADER_TABLE_SIZE, acked
            decoder.max_allowed_table_size = limit
        block = BLOCKS[index]
        assert _decoded(decoder, encoder.encode(block)) == _fields(block)


def test_a_smaller_client_table_is_signalled_at_the_start_of_the_next_block() -> None:
    encoder = Encoder()
    encoder.encode((HEAD, b""))
    encoder.resize(0)
    block = encoder.encode((HEAD, b""))
    assert block[:2] == b"\x20\x20"  # size 0 (emptied), then the new size, 0
    decoder = Decoder()
    decoder.max_allowed_table_size = 0
    assert _decoded(decoder, block) == list(HEAD.fields)
    assert encoder.used == 0  # nothing indexed: the table has no room


def test_a_larger_client_table_changes_nothing() -> None:
    encoder = Encoder()
    encoder.encode((HEAD, b""))
    encoder.resize(65536)
    assert len(encoder.encode((HEAD, b""))) == 3
