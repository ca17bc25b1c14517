"""Version strings as clients send them (issue 18, finding 8)."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.repository.manager import parse_version


@pytest.mark.parametrize(("text", "value"), [("", -1), ("1", 1), ("07", 7), ("10", 10)])
def test_versions_in_ascii_digits(text: str, value: int) -> None:
    assert parse_version(text) == value


@pytest.mark.parametrize("text", ["1_0", "\u0661", " 1", "+1", "-1", "1.0", "x"])
def test_anything_else_is_refused_not_read_as_a_number(text: str) -> None:
    with pytest.raises(PbdError) as caught:
        parse_version(text)
    assert caught.value.code is Code.INVALID_ARG
    assert f"specified version string '{text}'" in caught.value.message
