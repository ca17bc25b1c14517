"""gRPC's length-prefixed messages out of a stream's DATA, in whatever pieces they arrive.

A message that arrives whole in one piece is copied out of it (the connection reuses its read
buffer). A larger one gets a buffer of its declared size as soon as its 5-byte prefix is in,
and the connection reads the rest of it straight from the socket into that buffer
(:meth:`Deframer.room`): a 16 MiB request is copied once, by the kernel, on its way in.
Such buffers are promised memory before the bytes exist, so they come out of a daemon-wide
budget (:class:`Reservations`); past it a message grows with what actually arrives, copied in.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np

from pbd.grpc.protocol import Abort, Buffer

# Room promised at once to messages still arriving, daemon-wide: enough for the largest
# requests in flight; a client cannot make the daemon allocate more than this by declaring
# sizes it never sends.
RESERVABLE_BYTES = 256 * 1024 * 1024
# Smaller messages still arriving are collected in a bytearray: not worth a reservation.
RESERVE_FROM = 64 * 1024


class Reservations:
    def __init__(self, limit: int = RESERVABLE_BYTES) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class Deframer:
    __slots__ = (
        "max_message", "deliver", "reservations", "head", "buf", "size", "filled", "flag",
        "reserved",
    )  # fmt: skip

    def __init__(
        self,
        max_message: int,
        deliver: Callable[[int, Buffer], None],
        reservations: Reservations,
    ) -> None:
        self.max_message = max_message
        self.deliver = deliver  # (compressed flag, message); may raise Abort
        self.reservations = reservations
        self.head = b""  # a prefix cut across pieces
        self.buf: memoryview | bytearray | None = None  # the message being filled
        self.size = 0
        self.filled = 0
        self.flag = 0
        self.reserved = 0

    @property
    def pending(self) -> bool:
        """A message is part way in."""
        return bool(self.head) or self.buf is not None

    def feed(self, chunk: memoryview) -> None:
        """Take ``chunk`` (copying what it keeps: the caller may reuse it afterwards)."""
        pos, n = 0, len(chunk)
        while pos < n:
            if self.buf is None:
                if self.head or n - pos < 5:
                    need = 5 - len(self.head)
                    self.head += bytes(chunk[pos : pos + need])
                    pos += min(need, n - pos)
                    if len(self.head) < 5:
                        return
                    flag, length = self.head[0], int.from_bytes(self.head[1:5], "big")
                    self.head = b""
                else:
                    flag, length = chunk[pos], int.from_bytes(chunk[pos + 1 : pos + 5], "big")
                    pos += 5
                self._check_size(length)
                if n - pos >= length:  # whole in this piece
                    self.deliver(flag, bytes(chunk[pos : pos + length]))
                    pos += length
                    continue
                self._start(flag, length)
            take = min(n - pos, self.size - self.filled)
            buf = self.buf
            assert buf is not None
            if isinstance(buf, bytearray):
                buf += chunk[pos : pos + take]
            else:
                buf[self.filled : self.filled + take] = chunk[pos : pos + take]
            self.filled += take
            pos += take
            if self.filled == self.size:
                self._complete()

    def room(self) -> memoryview | None:
        """Where the next bytes of the message in progress go, if it has a buffer of its
        size; after writing ``n`` bytes there, call :meth:`wrote`."""
        if isinstance(self.buf, memoryview):
            return self.buf[self.filled :]
        return None

    def wrote(self, n: int) -> None:
        self.filled += n
        if self.filled == self.size:
            self._complete()

    def close(self) -> None:
        """The call is over: a message part way in is dropped, its reservation given back,
        and the call's callback let go (see ``Call._release``)."""
        self.buf = None
        self.head = b""
        self._unreserve()
        self.deliver = _dropped

    def _check_size(self, length: int) -> None:
        if length > self.max_message:
            raise Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({length} vs. {self.max_message})",
            )

    def _start(self, flag: int, length: int) -> None:
        self.flag, self.size, self.filled = flag, length, 0
        if length >= RESERVE_FROM and self.reservations.take(length):
            self.reserved = length
            # np.empty: not zeroed (bytearray(n) would write every byte once more).
            self.buf = memoryview(np.empty(length, dtype=np.uint8).data)
        else:
            self.buf = bytearray()

    def _complete(self) -> None:
        message, self.buf = self.buf, None
        assert message is not None
        self._unreserve()
        self.deliver(self.flag, message)

    def _unreserve(self) -> None:
        if self.reserved:
            self.reservations.give(self.reserved)
            self.reserved = 0


def _dropped(flag: int, body: Buffer) -> None:
    """What a closed deframer delivers to: nothing reaches a call that is over."""
