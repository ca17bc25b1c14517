"""The worker's ipc framing: random streams through both frame readers."""

from __future__ import annotations

from fuzz_oracles import check_framing, tally
from hypothesis import given, settings
from hypothesis import strategies as st

from pbd_wire.framing import HEADER

EXAMPLES = 200

# Mostly well-formed frames, then some bytes that may lie about the next frame's length.
frames = st.lists(st.binary(max_size=40)).map(
    lambda payloads: b"".join(HEADER.pack(len(p)) + p for p in payloads)
)
lengths = st.sampled_from([0, 1, 3, 2**26, 2**26 + 1, 2**32 - 1]).map(HEADER.pack)


@settings(max_examples=EXAMPLES)
@given(head=frames, tail=st.binary(max_size=8) | lengths)
def test_fuzz_framing(head: bytes, tail: bytes) -> None:
    tally("framing (hypothesis)", check_framing(head + tail))
