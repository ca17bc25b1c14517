"""OpenAI's error object and status codes, and pbd's errors in that form.

Every error is ``{"error": {"message", "type", "param", "code"}}``: 400
``invalid_request_error`` for a request pbd cannot serve as asked, 404 with code
``model_not_found`` for a model it does not serve, and for an error of the model or the daemon
the status of Triton's table (:mod:`pbd.http.status`): a 4xx is the client's
(``invalid_request_error``), a 5xx the server's (``server_error``).
"""

from __future__ import annotations

from typing import Any

from pbd.errors import PbdError
from pbd.http.status import http_status


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 - OpenAI's field name
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def model_not_found(model: str, why: str = "") -> ApiError:
    return ApiError(
        404, f"The model `{model}` does not exist{why}.", param="model", code="model_not_found"
    )


def from_pbd(error: PbdError) -> ApiError:
    status = http_status(error.code)
    kind = "invalid_request_error" if status < 500 else "server_error"
    return ApiError(status, error.message, type=kind)
