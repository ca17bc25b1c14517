"""HPACK (RFC 7541) decoding of request header blocks, with the connection's dynamic table.

A gRPC client's header blocks repeat: after the first request on a connection, grpc core
sends each call's headers as references into the dynamic table (8 or 9 bytes), adding an
entry only when a new ``grpc-timeout`` value appears. A block that changed nothing in the
table decodes the same way every time the table is as it was, so its fields are kept, keyed
by (block, table generation), and the next identical block costs one dictionary lookup.

The static table and the Huffman code come from python-hyper's ``hpack`` package.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from pbd.h2.frames import COMPRESSION_ERROR, ENHANCE_YOUR_CALM, ProtocolError

STATIC = HeaderTable.STATIC_TABLE
STATIC_COUNT = len(STATIC)
ENTRY_OVERHEAD = 32  # RFC 7541 section 4.1
DEFAULT_TABLE_SIZE = 4096
CACHE_ENTRIES = 32
# gRPC's repeated blocks are a few bytes; a larger one is decoded each time, so that a client
# sending distinct large blocks cannot make the cache hold megabytes.
MAX_CACHED_BLOCK = 256

Fields = tuple[tuple[bytes, bytes], ...]
# What the connection's check made of a request's fields (pbd.h2.fields): what is wrong with
# them or None, and the content-length they declare or -1. Cached with the fields.
Verdict = tuple[str | None, int]


class HeaderListTooLarge(Exception):
    """The block decoded (the table is in step) to a list larger than the advertised limit."""

    def __init__(self, size: int) -> None:
        super().__init__(f"header list of {size} bytes")
        self.size = size


class Decoder:
    """One connection's HPACK decoding context. A header list larger than ``max_list`` is
    decoded to its end but not kept (:class:`HeaderListTooLarge`); one larger than
    ``max_decoded`` stops decoding at once, and the connection with it."""

    def __init__(
        self,
        max_list: int,
        max_decoded: int | None = None,
        check: Callable[[Fields], Verdict] | None = None,
    ) -> None:
        self.max_list = max_list
        self.max_decoded = max(max_decoded or max_list, max_list)
        self.check = check or _unchecked
        self.table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self.size = 0
        self.max_size = DEFAULT_TABLE_SIZE
        self.generation = 0
        self.cache: dict[tuple[bytes, int], tuple[Fields, Verdict]] = {}

    def request(self, block: bytes) -> tuple[Fields, Verdict]:
        """A request's header block: its fields and their verdict, from the cache when the
        same block came before with the table as it is now."""
        key = (block, self.generation)
        known = self.cache.get(key)
        if known is not None:
            return known
        generation = self.generation
        fields = self.decode(block)
        known = (fields, self.check(fields))
        if self.generation == generation and len(block) <= MAX_CACHED_BLOCK:
            if len(self.cache) >= CACHE_ENTRIES:
                self.cache.clear()
            self.cache[key] = known
        return known

    def decode(self, block: bytes) -> Fields:
        fields: list[tuple[bytes, bytes]] = []
        total = 0
        pos, n = 0, len(block)
        while pos < n:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _integer(block, pos, 7)
                field = self._entry(index)
            elif byte & 0x40:  # literal, added to the table
                index, pos = _integer(block, pos, 6)
                field, pos = self._literal(block, pos, index)
                self._add(field)
            elif byte & 0x20:  # dynamic table size update
                if total:  # RFC 7541 section 4.2: only at the start of a block
                    raise ProtocolError("HPACK table size update after a field", COMPRESSION_ERROR)
                size, pos = _integer(block, pos, 5)
                if size > DEFAULT_TABLE_SIZE:
                    raise ProtocolError("HPACK table size above the limit", COMPRESSION_ERROR)
                self.max_size = size
                self._evict()
                self.generation += 1
                continue
            else:  # literal without indexing (0x00) or never indexed (0x10)
                index, pos = _integer(block, pos, 4)
                field, pos = self._literal(block, pos, index)
            total += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
            if total > self.max_list:
                if total > self.max_decoded:
                    # Decoding stops midway: the table may be out of step with the client's.
                    raise ProtocolError("header list too large", ENHANCE_YOUR_CALM)
                continue  # decoded for the table's sake, not kept
            fields.append(field)
        if total > self.max_list:
            raise HeaderListTooLarge(total)
        return tuple(fields)

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= STATIC_COUNT:
            return STATIC[index - 1]
        position = index - STATIC_COUNT - 1
        if index == 0 or position >= len(self.table):
            raise ProtocolError(f"HPACK index {index} out of range", COMPRESSION_ERROR)
        return self.table[position]

    def _literal(self, block: bytes, pos: int, index: int) -> tuple[tuple[bytes, bytes], int]:
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = _string(block, pos)
        value, pos = _string(block, pos)
        return (name, value), pos

    def _add(self, field: tuple[bytes, bytes]) -> None:
        self.generation += 1
        size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if size > self.max_size:  # RFC 7541 section 4.4: empties the table
            self.table.clear()
            self.size = 0
            return
        self.table.appendleft(field)
        self.size += size
        self._evict()

    def _evict(self) -> None:
        while self.size > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + ENTRY_OVERHEAD


def _integer(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(block) or shift > 28:
            raise ProtocolError("HPACK integer truncated or too large", COMPRESSION_ERROR)
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    if pos >= len(block):
        raise ProtocolError("HPACK string truncated", COMPRESSION_ERROR)
    huffman = block[pos] & 0x80
    length, pos = _integer(block, pos, 7)
    end = pos + length
    if end > len(block):
        raise ProtocolError("HPACK string truncated", COMPRESSION_ERROR)
    data = block[pos:end]
    if huffman:
        try:
            data = decode_huffman(data)
        except Exception as exc:  # hpack's HPACKDecodingError
            raise ProtocolError(f"HPACK Huffman code: {exc}", COMPRESSION_ERROR) from None
    return data, end


def _unchecked(fields: Fields) -> Verdict:
    return None, -1
