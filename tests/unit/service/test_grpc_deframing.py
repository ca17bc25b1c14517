"""pbd.grpc.deframing: messages out of pieces cut anywhere, read straight into a reserved
buffer or collected, reservations bounded and given back."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pbd.grpc.deframing import RESERVE_FROM, Deframer, Reservations
from pbd.grpc.protocol import Abort


def _framed(messages: list[bytes]) -> bytes:
    return b"".join(b"\0" + len(m).to_bytes(4, "big") + m for m in messages)


def _collector() -> tuple[list[bytes], Deframer, Reservations]:
    got: list[bytes] = []
    reservations = Reservations()
    deframer = Deframer(2**31 - 1, lambda flag, m: got.append(bytes(m)), reservations)
    return got, deframer, reservations


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=5),
    st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=40),
)
def test_pieces_cut_anywhere_give_the_messages_in_order(messages, cuts) -> None:
    got, deframer, _ = _collector()
    data = _framed(messages)
    pos, i = 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        deframer.feed(memoryview(data)[pos : pos + step])
        pos, i = pos + step, i + 1
    assert got == messages and not deframer.pending


def test_a_large_message_is_read_into_its_reserved_buffer() -> None:
    got, deframer, reservations = _collector()
    body = bytes(range(256)) * (RESERVE_FROM // 64)
    data = _framed([body])
    deframer.feed(memoryview(data)[:100])  # the prefix and a little: a buffer is reserved
    assert reservations.held == len(body)
    done = 95
    while done < len(body):
        room = deframer.room()
        assert room is not None
        n = min(len(room), 7000)
        room[:n] = body[done : done + n]  # what the connection's socket read would do
        deframer.wrote(n)
        done += n
    assert got == [body] and reservations.held == 0


def test_past_the_budget_a_message_is_collected_and_not_reserved() -> None:
    got: list[bytes] = []
    reservations = Reservations(limit=RESERVE_FROM)
    deframer = Deframer(2**31 - 1, lambda flag, m: got.append(bytes(m)), reservations)
    body = b"x" * (2 * RESERVE_FROM)
    data = memoryview(_framed([body]))
    deframer.feed(data[:1000])
    assert reservations.held == 0 and deframer.room() is None
    deframer.feed(data[1000:])
    assert got == [body]


def test_closing_mid_message_gives_the_reservation_back() -> None:
    _, deframer, reservations = _collector()
    deframer.feed(memoryview(_framed([b"y" * RESERVE_FROM]))[:10])
    assert reservations.held == RESERVE_FROM and deframer.pending
    deframer.close()
    assert reservations.held == 0 and not deframer.pending


def test_a_declared_size_over_the_limit_is_refused_from_its_prefix() -> None:
    deframer = Deframer(100, lambda flag, m: None, Reservations())
    with pytest.raises(Abort) as info:
        deframer.feed(memoryview(b"\0" + (101).to_bytes(4, "big")))
    assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
