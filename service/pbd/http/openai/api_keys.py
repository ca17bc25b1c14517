"""The OpenAI API's keys (``--openai-api-key``): a request names one as
``Authorization: Bearer KEY``, as OpenAI's clients send it.

With no key configured every request is served (the API is open, as before). The comparison
takes the same time whichever key it is and however much of it matches
(``hmac.compare_digest`` against every key), so timing tells a client nothing about a key.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from pbd.http.openai.errors import ApiError

SCHEME = "bearer"


class ApiKeys:
    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = tuple(key.encode() for key in keys)

    def check(self, authorization: str | None) -> None:
        """Raises a 401 ApiError unless ``authorization`` (the header's value) names a key."""
        if not self._keys:
            return
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != SCHEME or not token.strip():
            raise ApiError(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                code="invalid_api_key",
            )
        given = token.strip().encode("utf-8", "surrogateescape")
        matched = False
        for key in self._keys:  # every key, whichever matches: constant time
            matched |= hmac.compare_digest(given, key)
        if not matched:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
