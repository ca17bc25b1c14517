"""OpenAI's error objects, and pbd's errors in that form with Triton's statuses."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.http.openai.errors import from_pbd, invalid, model_not_found


def test_error_bodies() -> None:
    assert invalid("bad n", "n").body() == {
        "error": {"message": "bad n", "type": "invalid_request_error", "param": "n", "code": None}
    }
    missing = model_not_found("x")
    assert missing.status == 404
    assert missing.body()["error"] == {
        "message": "The model `x` does not exist.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        (Code.INVALID_ARG, 400, "invalid_request_error"),
        (Code.NOT_FOUND, 404, "invalid_request_error"),
        (Code.INTERNAL, 500, "server_error"),
        (Code.UNAVAILABLE, 503, "server_error"),
        (Code.RESOURCE_EXHAUSTED, 503, "server_error"),
        (Code.CANCELLED, 400, "invalid_request_error"),
    ],
)
def test_pbd_errors_keep_their_status(code: Code, status: int, kind: str) -> None:
    error = from_pbd(PbdError(code, "why"))
    assert (error.status, error.type, error.message) == (status, kind, "why")
