"""Transport-neutral errors.

Everything inside the daemon raises or returns :class:`PbdError`; one table at the gRPC edge
(``pbd.grpc.status``) maps :class:`Code` to a gRPC status. Nothing here imports a transport.
The codes are Triton's ``TRITONSERVER_Error_Code`` set plus RESOURCE_EXHAUSTED, which Triton
lacks but memory that runs out or a full queue needs.
"""

from __future__ import annotations

import enum


class Code(enum.Enum):
    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"

    @classmethod
    def parse(cls, name: str) -> Code:
        """The code named ``name``; UNKNOWN for names this version does not know."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN


class PbdError(Exception):
    """An error a client may see: a code and the exact message it gets."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # Retrying the same thing would fail the same way (a worker's start is refused).
        self.permanent = False
        # Triton's failure reason when not the model's doing (pbd.stats.FAILURE_REASONS).
        self.failure = ""
        # Refused before it reached a model (lookup, validation, admission): a stream with
        # triton_grpc_error answers these in band, as Triton does, and ends on the others.
        self.before_model = False

    def __repr__(self) -> str:
        return f"PbdError({self.code.name}, {self.message!r})"


# How Triton's Status names each code when it writes a status as text ("<word>: <message>").
_STATUS_WORDS = {
    Code.UNKNOWN: "Unknown",
    Code.INTERNAL: "Internal",
    Code.NOT_FOUND: "Not found",
    Code.INVALID_ARG: "Invalid argument",
    Code.UNAVAILABLE: "Unavailable",
    Code.UNSUPPORTED: "Unsupported",
    Code.ALREADY_EXISTS: "Already exists",
    Code.CANCELLED: "Cancelled",
    Code.RESOURCE_EXHAUSTED: "Resource exhausted",  # pbd's own code
}


def status_text(error: PbdError) -> str:
    """``error`` as Triton writes a status into a message: ``Invalid argument: ...``."""
    return f"{_STATUS_WORDS[error.code]}: {error.message}"


def invalid_arg(message: str) -> PbdError:
    return PbdError(Code.INVALID_ARG, message)


def not_found(message: str) -> PbdError:
    return PbdError(Code.NOT_FOUND, message)


def unavailable(message: str) -> PbdError:
    return PbdError(Code.UNAVAILABLE, message)


def rejected(message: str) -> PbdError:
    """UNAVAILABLE from a queue that refused or dropped a request (Triton's REJECTED)."""
    error = PbdError(Code.UNAVAILABLE, message)
    error.failure = "REJECTED"
    return error


# Triton's refusal of TRITONSERVER_REQUEST_RELEASE_RESCHEDULE outside an iterative sequence.
NOT_RESCHEDULABLE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


class Rescheduled(PbdError):
    """Not an answer: the model handed its request back (``set_release_flags(
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``). The sequence batcher of an iterative sequence
    runs it again; a scheduler that cannot fails the request with Triton's error, which this
    is (so it is an error wherever it is not understood)."""

    def __init__(self) -> None:
        super().__init__(Code.INTERNAL, NOT_RESCHEDULABLE)
