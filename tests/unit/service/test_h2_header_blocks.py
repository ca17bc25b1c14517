"""pbd.h2.header_blocks against python-hyper's HPACK encoder: the same header lists come back,
whatever the encoder chose (Huffman or not, indexing, table size updates, eviction), and the
cache of repeated blocks never answers with fields the dynamic table no longer holds."""

from __future__ import annotations

import pytest
from hpack import Decoder as HpackDecoder
from hpack import Encoder, NeverIndexedHeaderTuple
from hypothesis import given
from hypothesis import strategies as st

from pbd.h2.frames import COMPRESSION_ERROR, ProtocolError, hpack_int
from pbd.h2.header_blocks import CACHE_ENTRIES, MAX_CACHED_BLOCK, Decoder

LIMIT = 64 * 1024

names = st.sampled_from(
    [b":path", b"content-type", b"grpc-timeout", b"te", b"user-agent", b"x-key", b"x-a-bin"]
) | st.binary(min_size=1, max_size=20).map(lambda b: b.hex().encode())
values = st.binary(max_size=60)
header_lists = st.lists(st.tuples(names, values), max_size=12)


def _decoder() -> Decoder:
    return Decoder(LIMIT)


@given(st.lists(header_lists, min_size=1, max_size=8), st.booleans())
def test_round_trip_with_indexing(lists: list[list[tuple[bytes, bytes]]], huffman: bool) -> None:
    encoder, decoder = Encoder(), _decoder()
    for headers in lists:
        assert list(decoder.decode(encoder.encode(headers, huffman=huffman))) == headers


@given(
    st.lists(st.tuples(header_lists, st.sampled_from([0, 64, 100, 256, 4096])), max_size=8),
    st.booleans(),
)
def test_round_trip_with_table_size_updates_and_eviction(
    steps: list[tuple[list[tuple[bytes, bytes]], int]], huffman: bool
) -> None:
    encoder, decoder = Encoder(), _decoder()
    for headers, size in steps:
        encoder.header_table_size = size
        block = encoder.encode(headers, huffman=huffman)
        assert list(decoder.decode(block)) == headers
        assert decoder.size <= decoder.max_size == size


@given(header_lists)
def test_never_indexed_fields_leave_the_table_alone(headers: list[tuple[bytes, bytes]]) -> None:
    encoder, decoder = Encoder(), _decoder()
    block = encoder.encode([NeverIndexedHeaderTuple(n, v) for n, v in headers])
    assert list(decoder.decode(block)) == headers
    assert len(decoder.table) == 0


@given(st.lists(header_lists, min_size=1, max_size=10), st.integers(0, 300))
def test_repeated_blocks_never_come_from_a_stale_cache(
    lists: list[list[tuple[bytes, bytes]]], table_size: int
) -> None:
    """The same bytes mean different fields once the table changed: the first list is sent
    again (as references where the encoder can) between lists that add, evict or resize
    entries; every block decodes as hpack's own decoder, which has no cache, decodes it."""
    encoder, decoder, oracle = Encoder(), _decoder(), HpackDecoder()
    encoder.header_table_size = table_size
    first = lists[0]
    for headers in lists:
        for sent in (first, headers, first):
            block = encoder.encode(sent)
            fields = list(decoder.decode(block))
            assert fields == sent == [(n, v) for n, v in oracle.decode(block, raw=True)]


def test_indexed_block_is_cached_until_the_table_changes() -> None:
    encoder, decoder = Encoder(), _decoder()
    headers = [(b":path", b"/x/Y"), (b"x-key", b"one")]
    decoder.decode(encoder.encode(headers))
    block = encoder.encode(headers)  # now all references: changes nothing
    assert decoder.decode(block) is decoder.decode(block)
    decoder.decode(encoder.encode([(b"x-key", b"two")]))  # adds an entry: indexes shift
    assert list(decoder.decode(block)) == [(b"x-key", b"one"), (b"x-key", b"two")]


def test_cache_stays_bounded() -> None:
    decoder = _decoder()
    for i in range(CACHE_ENTRIES * 3):
        decoder.decode(_literal(i))
    assert len(decoder.cache) <= CACHE_ENTRIES


def _literal(i: int) -> bytes:
    """A literal without indexing: decodes without touching the table, so it is cached."""
    name, value = b"x-n", str(i).encode()
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def _compression_error(block: bytes, decoder: Decoder | None = None) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        (decoder or _decoder()).decode(block)
    assert info.value.code == COMPRESSION_ERROR
    return info.value


@pytest.mark.parametrize(
    "block",
    [
        bytes([0x80]),  # index 0
        bytes([0x80 | 62]),  # first dynamic index, table empty
        b"\xff\x80\x01",  # a large index
    ],
)
def test_index_out_of_range(block: bytes) -> None:
    assert "out of range" in str(_compression_error(block))


@pytest.mark.parametrize(
    "block",
    [
        b"\xff",  # integer continuation missing
        b"\xff\xff\xff\xff\xff\xff\xff\x7f",  # integer of more than 32 bits
        b"\x00",  # literal without its name
        b"\x00\x05ab",  # name shorter than its length
        b"\x00\x01a\x05ab",  # value shorter than its length
        b"\x00\x01a\x81\xff",  # Huffman value with EOS
        b"\x3f\xe2\x1f",  # table size update to 4097
    ],
)
def test_malformed_blocks(block: bytes) -> None:
    _compression_error(block)


def test_oversize_header_list() -> None:
    """A small block of references to one large entry (an HPACK bomb) is stopped at the limit,
    and as a COMPRESSION_ERROR: decoding stopped midway, so the table is out of step."""
    encoder = Encoder()
    big = (b"x-big", b"v" * 3000)
    decoder = Decoder(16 * 1024)
    decoder.decode(encoder.encode([big]))
    block = encoder.encode([big] * 10)
    assert len(block) < 20
    assert "header list" in str(_compression_error(block, decoder))


def test_cache_memory_stays_small_under_large_blocks() -> None:
    """A client sending distinct large blocks that change nothing (literals without indexing)
    must not make the connection keep hundreds of them."""
    decoder = _decoder()
    value = b"v" * 60_000
    for i in range(CACHE_ENTRIES):
        name = b"x-%d" % i
        decoder.decode(b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value)
    assert sum(len(block) for block, _ in decoder.cache) <= CACHE_ENTRIES * MAX_CACHED_BLOCK
