"""pbd.h2.header_blocks against python-hyper's HPACK encoder: the same header lists come back,
whatever the encoder chose (Huffman or not, indexing, table size updates, eviction), and the
cache of repeated blocks never answers with fields the dynamic table no longer holds."""

from __future__ import annotations

import pytest
from hpack import Decoder as HpackDecoder
from hpack import Encoder, NeverIndexedHeaderTuple
from hypothesis import given
from hypothesis import strategies as st

from pbd.h2.frames import COMPRESSION_ERROR, ENHANCE_YOUR_CALM, ProtocolError, hpack_int
from pbd.h2.header_blocks import CACHE_ENTRIES, MAX_CACHED_BLOCK, Decoder, HeaderListTooLarge

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
    decoder.request(encoder.encode(headers))
    block = encoder.encode(headers)  # now all references: changes nothing
    assert decoder.request(block) is decoder.request(block)
    decoder.request(encoder.encode([(b"x-key", b"two")]))  # adds an entry: indexes shift
    assert list(decoder.request(block)[0]) == [(b"x-key", b"one"), (b"x-key", b"two")]


def test_the_verdict_is_cached_with_the_fields() -> None:
    checked: list[object] = []

    def check(fields: object) -> tuple[str | None, int]:
        checked.append(fields)
        return "what is wrong", -1

    encoder, decoder = Encoder(), Decoder(LIMIT, check=check)
    decoder.request(encoder.encode([(b"x-key", b"one")]))
    block = encoder.encode([(b"x-key", b"one")])
    assert decoder.request(block)[1] == decoder.request(block)[1] == ("what is wrong", -1)
    assert len(checked) == 2  # the block that added an entry, then the cached one once


def test_cache_stays_bounded() -> None:
    decoder = _decoder()
    for i in range(CACHE_ENTRIES * 3):
        decoder.request(_literal(i))
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


def test_a_header_list_over_the_limit_is_decoded_to_its_end_but_not_kept() -> None:
    """The client's table changes in such a block too: the next block must still decode."""
    encoder = Encoder()
    decoder = Decoder(16 * 1024, 64 * 1024)
    with pytest.raises(HeaderListTooLarge) as info:
        decoder.decode(encoder.encode([(b"x-big", b"v" * 20_000), (b"x-next", b"n")]))
    assert info.value.size == 20_000 + 5 + 32 + 7 + 32
    assert list(decoder.decode(encoder.encode([(b"x-next", b"n")]))) == [(b"x-next", b"n")]


def test_an_hpack_bomb_stops_decoding_and_the_connection() -> None:
    """A small block of references to one large entry would decode to megabytes: decoding
    stops past the hard limit, an ENHANCE_YOUR_CALM connection error (the table may be out
    of step from there on)."""
    encoder = Encoder()
    big = (b"x-big", b"v" * 3000)
    decoder = Decoder(16 * 1024, 64 * 1024)
    decoder.decode(encoder.encode([big]))
    block = encoder.encode([big] * 1000)
    assert len(block) < 1100
    with pytest.raises(ProtocolError) as info:
        decoder.decode(block)
    assert info.value.code == ENHANCE_YOUR_CALM


def test_a_table_size_update_after_a_field_is_a_compression_error() -> None:
    """RFC 7541 section 4.2: updates come first in a block."""
    assert "after a field" in str(_compression_error(b"\x82" + hpack_int(100, 5, 0x20)))
    decoder = _decoder()
    two = hpack_int(0, 5, 0x20) + hpack_int(100, 5, 0x20) + b"\x82"
    assert list(decoder.decode(two)) == [(b":method", b"GET")] and decoder.max_size == 100


def test_cache_memory_stays_small_under_large_blocks() -> None:
    """A client sending distinct large blocks that change nothing (literals without indexing)
    must not make the connection keep hundreds of them."""
    decoder = _decoder()
    value = b"v" * 60_000
    for i in range(CACHE_ENTRIES):
        name = b"x-%d" % i
        decoder.request(b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value)
    assert sum(len(block) for block, _ in decoder.cache) <= CACHE_ENTRIES * MAX_CACHED_BLOCK
