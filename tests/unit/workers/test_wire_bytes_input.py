"""pbd_wire.bytes_input: Triton 2.51's BYTES input check, its messages word for word (each
case was sent to Triton 2.51 with python_backend, in the request and in a client's shared
memory: both gave the message below)."""

from __future__ import annotations

import pytest

from pbd_wire.bytes_input import BytesInputError, check_bytes_input


def _element(data: bytes) -> bytes:
    return len(data).to_bytes(4, "little") + data


def _message(data: bytes, count: int) -> str:
    with pytest.raises(BytesInputError) as info:
        check_bytes_input(memoryview(data), count, "IN_BYTES", "identity_all", "rq7")
    return str(info.value)


@pytest.mark.parametrize(
    ("data", "count"),
    [(b"", 0), (_element(b""), 1), (_element(b"a") + _element(b"bc"), 2)],
)
def test_well_formed_inputs_pass(data: bytes, count: int) -> None:
    check_bytes_input(memoryview(data), count, "IN_BYTES", "identity_all", "rq7")


@pytest.mark.parametrize(
    ("data", "count", "message"),
    [
        (
            b"\x00",
            0,
            "[request id: rq7] incomplete string length indicator for inference input "
            "'IN_BYTES' for model 'identity_all', expecting 4 bytes but only 1 bytes available. "
            "Please make sure the string length indicator is in one buffer.",
        ),
        (
            _element(b"") + b"\x05\x00",
            1,
            "[request id: rq7] incomplete string length indicator for inference input "
            "'IN_BYTES' for model 'identity_all', expecting 4 bytes but only 2 bytes available. "
            "Please make sure the string length indicator is in one buffer.",
        ),
        (
            b"\x05\x00\x00\x00ab",
            0,
            "[request id: rq7] unexpected number of string elements 1 for inference input "
            "'IN_BYTES' for model 'identity_all', expecting 0",
        ),
        (
            _element(b"") + b"\x05\x00\x00\x00ab",
            1,
            "[request id: rq7] unexpected number of string elements 2 for inference input "
            "'IN_BYTES' for model 'identity_all', expecting 1",
        ),
        (
            b"\x05\x00\x00\x00ab",
            1,
            "incomplete string data for inference input 'IN_BYTES', expecting string of length 5 "
            "but only 2 bytes available",
        ),
        (
            b"\xff\xff\xff\xff",
            1,
            "incomplete string data for inference input 'IN_BYTES', expecting string of length "
            "4294967295 but only 0 bytes available",
        ),
        (
            _element(b"a"),
            2,
            "[request id: rq7] expected 2 string elements for inference input 'IN_BYTES' for "
            "model 'identity_all', got 1",
        ),
    ],
)
def test_malformed_inputs_get_tritons_message(data: bytes, count: int, message: str) -> None:
    assert _message(data, count) == message
