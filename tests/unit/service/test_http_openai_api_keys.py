"""The OpenAI API's keys: a request passes with one of them as a Bearer token, else 401."""

from __future__ import annotations

import pytest

from pbd.http.openai.api_keys import ApiKeys
from pbd.http.openai.errors import ApiError


def test_no_key_configured_serves_everyone() -> None:
    ApiKeys([]).check(None)
    ApiKeys([]).check("Bearer anything")


@pytest.mark.parametrize("header", ["Bearer k1", "Bearer k2", "bearer  k2 ", "BEARER k1"])
def test_any_configured_key_passes(header: str) -> None:
    ApiKeys(["k1", "k2"]).check(header)


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (None, "You didn't provide an API key"),
        ("", "You didn't provide an API key"),
        ("Bearer ", "You didn't provide an API key"),
        ("Basic azE6", "You didn't provide an API key"),
        ("k1", "You didn't provide an API key"),
        ("Bearer k3", "Incorrect API key provided"),
        ("Bearer k1k2", "Incorrect API key provided"),
        ("Bearer k", "Incorrect API key provided"),
    ],
)
def test_anything_else_is_401_in_openais_shape(header: str | None, words: str) -> None:
    with pytest.raises(ApiError) as info:
        ApiKeys(["k1", "k2"]).check(header)
    error = info.value
    assert error.status == 401 and words in error.message
    assert error.body()["error"]["code"] == "invalid_api_key"
    assert error.body()["error"]["type"] == "invalid_request_error"
    assert "k1" not in error.message and "k3" not in error.message
