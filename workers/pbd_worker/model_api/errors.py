"""The two error types models see: ``TritonError`` (a value) and ``TritonModelException``.

``TritonError`` codes are their own names (``"NOT_FOUND"``...), so an error crosses the process
boundary as plain text and the daemon maps the name to a gRPC status in one table.
"""

from __future__ import annotations

from typing import Final

_CODE_NAMES: Final = (
    "UNKNOWN",
    "INTERNAL",
    "NOT_FOUND",
    "INVALID_ARG",
    "UNAVAILABLE",
    "UNSUPPORTED",
    "ALREADY_EXISTS",
    "CANCELLED",
)


class TritonModelException(Exception):
    """Raised by the API on misuse, and by models to fail initialize/execute/finalize."""

    def message(self) -> str:
        # Older Triton releases defined this in Python; some models still call it.
        return str(self)


class TritonError(Exception):
    """An error attached to an ``InferenceResponse``: ``TritonError(message, code=INTERNAL)``.

    Triton's ``TritonError`` is a plain value; deriving from ``Exception`` here also lets a model
    ``raise`` one, in which case the batch fails with the error's code.
    """

    UNKNOWN: Final = "UNKNOWN"
    INTERNAL: Final = "INTERNAL"
    NOT_FOUND: Final = "NOT_FOUND"
    INVALID_ARG: Final = "INVALID_ARG"
    UNAVAILABLE: Final = "UNAVAILABLE"
    UNSUPPORTED: Final = "UNSUPPORTED"
    ALREADY_EXISTS: Final = "ALREADY_EXISTS"
    CANCELLED: Final = "CANCELLED"

    def __init__(self, message: str, code: str = INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError message must be a str, got {type(message).__name__}")
        if code not in _CODE_NAMES:
            raise TypeError(
                f"TritonError code must be one of TritonError.{', TritonError.'.join(_CODE_NAMES)}"
                f"; got {code!r}"
            )
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> str:
        return self._code

    def _code_name(self) -> str:
        """The code as the name the daemon's status table knows."""
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code=TritonError.{self._code})"
