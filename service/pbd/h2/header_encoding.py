"""HPACK (RFC 7541) encoding of the header blocks a server connection sends.

A gRPC server answers every call with the same headers and, mostly, the same trailers. Those
lists are :class:`Fixed`: the first time a connection sends one, its fields go into the
client's dynamic table (literals with incremental indexing); afterwards the list is one byte
per field, an index. For a unary answer that is 4 bytes of header blocks instead of about 90,
so fewer bytes to build and to send. Anything else (an error's status and message) is
literal without indexing, appended after the fixed part.

The encoder never evicts: a fixed field goes into the table only while the table has room for
it under the client's SETTINGS_HEADER_TABLE_SIZE, so the client's table and the encoder's idea
of it cannot drift apart. A block must be encoded when it is written, in the order blocks go
on the wire, since each may change what the next one refers to (pbd.h2.sending does that).
"""

from __future__ import annotations

from pbd.h2.frames import hpack_int, literal
from pbd.h2.header_blocks import DEFAULT_TABLE_SIZE, ENTRY_OVERHEAD, STATIC, STATIC_COUNT


class Fixed:
    """A header list sent again and again; its fields are indexed (compared by identity)."""

    __slots__ = ("fields",)

    def __init__(self, fields: list[tuple[bytes, bytes]]) -> None:
        self.fields = tuple(fields)


# A header block to send: a fixed list (or None) and literal representations after it.
Block = tuple[Fixed | None, bytes]

_STATIC_FIELDS = {field: index + 1 for index, field in enumerate(STATIC)}


class Encoder:
    __slots__ = ("max_size", "used", "entries", "cache", "pending")

    def __init__(self) -> None:
        self.max_size = DEFAULT_TABLE_SIZE  # the table size the client's decoder expects
        self.used = 0
        # Each field the encoder put in the client's table, with its insertion number.
        self.entries: dict[tuple[bytes, bytes], int] = {}
        self.cache: dict[Fixed, bytes] = {}  # a fixed list's block while the table holds
        self.pending = b""  # a table size update owed at the start of the next block

    def encode(self, block: Block) -> bytes:
        fixed, tail = block
        head = b""
        if fixed is not None:
            head = self.cache.get(fixed) or self._fixed(fixed)
        if self.pending:
            head, self.pending = self.pending + head, b""
        return head + tail if tail else head

    def resize(self, limit: int) -> None:
        """The client's SETTINGS_HEADER_TABLE_SIZE: below the size in use, the table is
        emptied and resized by updates at the start of the next block (section 4.2)."""
        if limit >= self.max_size:
            return  # the encoder may use less than the client allows
        self.max_size = limit
        self.pending = hpack_int(0, 5, 0x20) + hpack_int(limit, 5, 0x20)
        self.used = 0
        self.entries.clear()
        self.cache.clear()

    def _fixed(self, fixed: Fixed) -> bytes:
        parts = []
        inserted = False
        count = len(self.entries)
        for field in fixed.fields:
            number = self.entries.get(field)
            if number is not None:  # the newest entry is index STATIC_COUNT + 1
                parts.append(hpack_int(STATIC_COUNT + count - number, 7, 0x80))
                continue
            static = _STATIC_FIELDS.get(field)
            if static is not None:
                parts.append(hpack_int(static, 7, 0x80))
                continue
            size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
            if self.used + size > self.max_size:
                parts.append(literal(*field))
                continue
            parts.append(b"\x40" + literal(*field)[1:])  # the same literal, with indexing
            self.entries[field] = count
            count += 1
            self.used += size
            inserted = True
        encoded = b"".join(parts)
        if inserted:
            self.cache.clear()  # every index shifted
        else:
            self.cache[fixed] = encoded
        return encoded
