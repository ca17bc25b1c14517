"""RFC 7541 (HPACK) conformance of pbd's server, decoding the client's field blocks and encoding
its own: one case per requirement, named by its section, checked on the wire (h2_wire)."""

from __future__ import annotations

from h2_wire import Client, message, request, run
from hpack import Encoder

from pbd.h2 import frames as f


def _size_update(size: int) -> bytes:
    return f.hpack_int(size, 5, 0x20)


def _indexed_literal(name: bytes, value: bytes) -> bytes:
    """A literal with incremental indexing, new name (section 6.2.1)."""
    return b"\x40" + f.literal(name, value)[1:]


def _request_block() -> bytes:
    return b"".join(f.literal(name, value) for name, value in request())


def _served(c: Client, block: bytes, stream: int = 1) -> bytes:
    return f.frame(f.HEADERS, f.END_HEADERS, stream, block) + f.frame(
        f.DATA, f.END_STREAM, stream, message()
    )


def _compression_error(block: bytes) -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.HEADERS, f.END_HEADERS, 1, block))
        await c.connection_error(f.COMPRESSION_ERROR)

    run(case)


def test_2_3_2_entries_added_to_the_dynamic_table_serve_later_blocks() -> None:
    async def case(c: Client) -> None:
        encoder = Encoder()  # indexes every field: the second block is all references
        c.send(_served(c, encoder.encode(request()), 1))
        await c.answered(1)
        second = encoder.encode(request())
        assert len(second) < 10
        c.send(_served(c, second, 3))
        await c.answered(3)

    run(case)


def test_2_3_3_an_index_past_both_tables_is_a_compression_error() -> None:
    _compression_error(f.hpack_int(70, 7, 0x80))


def test_2_3_3_index_0_is_a_compression_error() -> None:
    _compression_error(b"\x80")


def test_4_2_a_table_size_update_at_the_start_of_a_block_is_taken() -> None:
    async def case(c: Client) -> None:
        block = _size_update(0) + _size_update(256) + c.block_of(request())
        c.send(_served(c, block))
        await c.answered(1)

    run(case)


def test_4_2_a_table_size_update_after_a_field_is_a_compression_error() -> None:
    _compression_error(_request_block() + _size_update(100))


def test_4_4_an_entry_larger_than_the_table_empties_it() -> None:
    async def case(c: Client) -> None:
        # A table of 64 bytes holds one small entry; an entry of more than 64 bytes empties
        # it: a reference to the old entry is then an error.
        block = _size_update(64) + c.block_of(request()) + _indexed_literal(b"x-a", b"1")
        c.send(_served(c, block, 1))
        await c.answered(1)
        big = c.block_of(request()) + _indexed_literal(b"x-big", b"v" * 100)
        c.send(_served(c, big, 3))
        await c.answered(3)
        c.send(f.frame(f.HEADERS, f.END_HEADERS, 5, f.hpack_int(62, 7, 0x80)))
        await c.connection_error(f.COMPRESSION_ERROR)

    run(case)


def test_4_4_an_entry_larger_than_the_default_table_empties_it_and_is_served() -> None:
    """Issue 51's probe: on the default table (4,096 bytes), an entry of 5,000 bytes is not an
    error; the request that carries it is served, and the table is empty after it."""

    async def case(c: Client) -> None:
        first = c.block_of(request()) + _indexed_literal(b"x-a", b"1")
        c.send(_served(c, first, 1))
        await c.answered(1)
        big = c.block_of(request()) + _indexed_literal(b"x-big", b"v" * 5000)
        c.send(_served(c, big, 3))
        await c.answered(3)
        c.send(f.frame(f.HEADERS, f.END_HEADERS, 5, f.hpack_int(62, 7, 0x80)))
        await c.connection_error(f.COMPRESSION_ERROR)

    run(case)


def test_5_1_an_integer_past_its_bytes_is_a_compression_error() -> None:
    _compression_error(b"\xff")


def test_5_1_an_integer_too_large_is_a_compression_error() -> None:
    _compression_error(b"\xff\xff\xff\xff\xff\xff\xff\x7f")


def test_5_2_a_string_past_the_block_is_a_compression_error() -> None:
    _compression_error(b"\x00\x05ab")


def test_5_2_a_huffman_string_with_eos_is_a_compression_error() -> None:
    _compression_error(b"\x00\x81\xff\x01a")


def test_5_2_huffman_padding_longer_than_7_bits_is_a_compression_error() -> None:
    _compression_error(b"\x00\x82\xff\xff\x01a")


def test_6_3_a_table_size_update_past_the_settings_limit_is_a_compression_error() -> None:
    _compression_error(_size_update(4097) + _request_block())


def test_4_2_the_server_signals_a_smaller_table_after_the_client_lowers_it() -> None:
    """RFC 9113 section 6.5.2 and RFC 7541 section 4.2: the client's SETTINGS_HEADER_TABLE_SIZE
    bounds the server's table; once the client lowers it below what the server may have used
    (4096), the server's next field block opens with a size update no larger."""

    async def case(c: Client) -> None:
        c.send(c.call(1))
        await c.answered(1)
        c.send(f.settings({f.HEADER_TABLE_SIZE: 0}))
        c.send(c.call(3))
        frames = await c.until_ping()
        first = next(x for x in frames if x.kind == f.HEADERS and x.stream == 3)
        assert first.payload[0] & 0xE0 == 0x20, first.payload[:4]  # a size update first
        assert first.fields is not None and first.fields[0] == (b":status", b"200")

    run(case)


def test_3_2_the_servers_blocks_decode_in_order_across_many_answers() -> None:
    async def case(c: Client) -> None:
        c.send(*(c.call(1 + 2 * i, b"x%d" % i) for i in range(20)))
        frames = await c.until_ping()
        for i in range(20):
            mine = [x for x in frames if x.stream == 1 + 2 * i]
            assert [x.kind for x in mine] == [f.HEADERS, f.DATA, f.HEADERS]
            assert mine[1].payload == message(b"x%d" % i)
            assert mine[0].fields is not None and mine[-1].fields == [(b"grpc-status", b"0")]

    run(case)
