"""Plain pbd types the dataplane works with; the gRPC edge converts to and from these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from pbd.validation import PreparedRequest, ShmSlice

# Request/response parameter values. ``Uint64`` marks the protocol's uint64_param, which Triton
# accepts for ``priority`` only.
ParamValue = Union[bool, int, str, float, "Uint64"]


@dataclass(frozen=True)
class Uint64:
    value: int


@dataclass
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: memoryview | None  # the raw (wire-form) bytes
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # In device memory instead (a BLS call's GPU input in a CUDA pool block): data is None.
    device: ShmSlice | None = None


@dataclass
class RequestedOutput:
    name: str
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass
class InferRequest:
    model_name: str
    model_version: str
    id: str
    inputs: list[InputTensor]
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # A pbd.tracing.request.RequestTrace when this request is traced (sampled), else None.
    trace: Any = None
    # Set when the request is a BLS call a model made (pbd.bls.service): the call's daemon-wide id.
    bls_call: int = 0

    @property
    def log_id(self) -> str:
        return self.id or "<id_unknown>"


@dataclass
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: memoryview


@dataclass
class InferResult:
    """A response whose output bytes still live in shared memory.

    Use it as a context manager: the bytes stay valid inside the ``with`` block and are handed
    back to the worker/arena when it ends, so the caller copies them exactly once.
    """

    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    _release: Callable[[], None] | None = None

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> InferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: str = ""
    state: str = ""
    reason: str = ""


def request_batch_size(prepared: PreparedRequest, max_batch_size: int) -> int:
    """The batch dimension a request adds to an execute (1 for a model without batching)."""
    if max_batch_size <= 0 or not prepared.inputs:
        return 1
    shape = prepared.inputs[0].shape
    return shape[0] if shape else 1
