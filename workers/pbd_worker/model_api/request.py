"""``pb_utils.InferenceRequest`` and the small option types a BLS request carries.

The runtime builds requests with ``InferenceRequest._from_runtime``; models build BLS requests with
the public constructor, which checks its arguments as Triton does. BLS and the response sender
are delivered through hooks in ``state``; until the runtime installs one, the feature is refused
with a message saying so, never faked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

from pbd_worker.model_api import state
from pbd_worker.model_api.errors import TritonModelException
from pbd_worker.model_api.parameters import parameters_to_json
from pbd_worker.model_api.tensor import Tensor

TRITONSERVER_REQUEST_RELEASE_ALL = 1
_UINT64_LIMIT = 2**64


class MemoryType(IntEnum):
    """Where a BLS request would like its outputs (numbering as Triton's)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """``PreferredMemory(preferred_memory_type, preferred_device_id=0)`` for BLS outputs."""

    def __init__(self, preferred_memory_type: MemoryType, preferred_device_id: int = 0) -> None:
        try:
            self.preferred_memory_type = MemoryType(preferred_memory_type)
        except ValueError:
            raise TypeError(
                "preferred_memory_type must be pb_utils.TRITONSERVER_MEMORY_CPU or "
                f"pb_utils.TRITONSERVER_MEMORY_GPU, got {preferred_memory_type!r}"
            ) from None
        if not isinstance(preferred_device_id, int):
            raise TypeError(f"preferred_device_id must be an int, got {preferred_device_id!r}")
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """The request's trace; ``get_context()`` is its W3C trace context as Triton gives it
    (JSON: ``{"traceparent": "00-..."}``), or ``None``."""

    __slots__ = ("_context", "_ids")

    def __init__(self, context: str | None = None) -> None:
        self._context = context or None
        self._ids: tuple[int, int, int] | None = None

    @classmethod
    def _of(cls, trace_id: int, span_id: int, flags: int) -> InferenceTrace:
        """A traced request's (the worker runtime makes it); the text is written only when
        a model asks for it."""
        made = cls()
        made._ids = (trace_id, span_id, flags)
        return made

    def get_context(self) -> str | None:
        if self._ids is not None:
            trace_id, span_id, flags = self._ids
            # What json.dumps({"traceparent": ...}) gives, without its encoder.
            traceparent = f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"
            self._context = f'{{"traceparent": "{traceparent}"}}'
            self._ids = None
        return self._context


def _correlation_id(value: object) -> int | str:
    if isinstance(value, int) and 0 <= value < _UINT64_LIMIT:
        return int(value)
    if isinstance(value, str):
        return value
    raise TritonModelException("Correlation ID must be integer or string")


def _tensors(inputs: Iterable[Any]) -> list[Tensor]:
    tensors = list(inputs)
    for tensor in tensors:
        if tensor is None:  # Triton's stub checks each input (TritonModelException)
            raise TritonModelException("Input tensor cannot be None.")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"inputs must be pb_utils.Tensor objects, got {type(tensor).__name__}")
    return tensors


class _Required:
    """The default of an argument Triton's binding requires: leaving it out is a TypeError."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


def _given(value: Any, name: str) -> Any:
    """``value`` unless it was left out or is None: Triton's binding refuses both."""
    if value is _REQUIRED:
        raise TypeError(f"InferenceRequest() missing required argument '{name}'")
    if value is None:
        raise TypeError(f"InferenceRequest() argument '{name}' must not be None")
    return value


def _text(value: object, what: str) -> str:
    """A ``std::string`` argument as Triton's pybind11 layer takes it: ``str``, or ``bytes``
    holding UTF-8 (python_backend's BLS example passes ``model_name`` as the bytes a
    TYPE_STRING input holds)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise TypeError(f"{what} must be str or UTF-8 bytes, got {value!r}") from None
    raise TypeError(f"{what} must be str or bytes, got {type(value).__name__}")


def _names(names: Iterable[Any]) -> list[str]:
    if isinstance(names, str | bytes):
        raise TypeError("requested_output_names must be a list of str, not a single string")
    return list(dict.fromkeys(_text(n, "requested_output_names entries") for n in names))


def _int(value: object, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or not low <= value < high:
        raise TypeError(f"{what} must be an int in [{low}, {high}), got {value!r}")
    return int(value)


class InferenceRequest:
    """An inference request: one the model received, or a BLS request it builds."""

    def __init__(
        self,
        request_id: str | bytes = "",
        correlation_id: int | str = 0,
        inputs: Iterable[Tensor] = _REQUIRED,
        requested_output_names: Iterable[str] = _REQUIRED,
        model_name: str | bytes = _REQUIRED,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        # Triton's binding: inputs, requested_output_names and model_name have no default,
        # and only parameters (and here preferred_memory and trace) may be None.
        model_name = _text(_given(model_name, "model_name"), "model_name")
        inputs = _given(inputs, "inputs")
        requested_output_names = _given(requested_output_names, "requested_output_names")
        correlation_id = _given(correlation_id, "correlation_id")
        request_id = _text(request_id, "request_id")
        if preferred_memory is not None and not isinstance(preferred_memory, PreferredMemory):
            raise TypeError("preferred_memory must be a pb_utils.PreferredMemory")
        if trace is not None and not isinstance(trace, InferenceTrace):
            raise TypeError("trace must be a pb_utils.InferenceTrace")
        self._init(
            inputs=_tensors(inputs),
            request_id=request_id,
            correlation_id=_correlation_id(correlation_id),
            requested_output_names=_names(requested_output_names),
            flags=_int(flags, "flags", 0, 2**32),
            timeout=_int(timeout, "timeout", 0, _UINT64_LIMIT),
            parameters_json=parameters_to_json(parameters),
            model_name=model_name,
            model_version=_int(model_version, "model_version", -(2**63), 2**63),
            trace=trace or InferenceTrace(),
        )
        self._preferred_memory = preferred_memory

    def _init(
        self,
        *,
        inputs: list[Tensor],
        request_id: str,
        correlation_id: int | str,
        requested_output_names: list[str],
        flags: int,
        timeout: int,
        parameters_json: str,
        model_name: str,
        model_version: int,
        trace: InferenceTrace,
    ) -> None:
        self._inputs = inputs
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = requested_output_names
        self._flags = flags
        self._timeout = timeout
        self._parameters_json = parameters_json
        self._model_name = model_name
        self._model_version = model_version
        self._trace = trace
        self._preferred_memory = None
        self._cancelled = False
        self._cancel_flag: Callable[[], bool] | None = None  # the daemon's page (runtime)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._response_sender: Any = None

    @classmethod
    def _from_runtime(
        cls,
        *,
        inputs: list[Tensor],
        request_id: str,
        correlation_id: int | str,
        requested_output_names: list[str],
        flags: int,
        timeout: int,
        parameters_json: str,
        model_name: str,
        model_version: int,
        trace_context: str | None,
    ) -> InferenceRequest:
        """A request the daemon sent; its fields were validated there."""
        request = cls.__new__(cls)
        # _init's fields, set here: one request per request served.
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._requested_output_names = requested_output_names
        request._flags = flags
        request._timeout = timeout
        request._parameters_json = parameters_json
        request._model_name = model_name
        request._model_version = model_version
        request._trace = InferenceTrace(trace_context)
        request._preferred_memory = None
        request._cancelled = False
        request._cancel_flag = None
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        request._response_sender = None
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> set[str]:
        """The outputs the client asked for (a set, as in Triton); empty means all."""
        return set(self._requested_output_names)

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = _int(flags, "flags", 0, 2**32)

    def timeout(self) -> int:
        """The request timeout in microseconds; 0 means none."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON object string (``json.loads`` it)."""
        return self._parameters_json

    def trace(self) -> InferenceTrace:
        return self._trace

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def is_cancelled(self) -> bool:
        if not self._cancelled and self._cancel_flag is not None:
            self._cancelled = self._cancel_flag()
        return self._cancelled

    def _set_cancelled(self) -> None:
        """The runtime learned that the client cancelled this request."""
        self._cancelled = True

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` asks for the request to come back."""
        self._release_flags = _int(flags, "flags", 0, 2**32)

    def _get_release_flags(self) -> int:
        return self._release_flags

    def get_response_sender(self) -> Any:
        factory = state.response_sender_factory
        if factory is None:
            raise TritonModelException(
                "InferenceRequest.get_response_sender() is not available in this pbd version: "
                "the response sender (decoupled models) is not supported yet."
            )
        if self._response_sender is None:
            self._response_sender = factory(self)
        return self._response_sender

    def exec(self, decoupled: bool = False) -> Any:
        """BLS: run this request on ``model_name`` and wait for the response(s)."""
        return _installed(state.bls_executor)(self, bool(decoupled))

    def async_exec(self, decoupled: bool = False) -> Any:
        """BLS from ``async def execute``: an awaitable of what ``exec`` returns."""
        return _installed(state.bls_async_executor)(self, bool(decoupled))

    def __repr__(self) -> str:
        names = [t.name() for t in self._inputs]
        return (
            f"InferenceRequest(id={self._request_id!r}, model={self._model_name!r}, inputs={names})"
        )


def _installed(executor: state.BlsExecutor | None) -> state.BlsExecutor:
    if executor is None:
        raise TritonModelException(
            "InferenceRequest.exec()/async_exec() (BLS) is not available in this pbd version: "
            "calling other models from a Python model is not supported yet."
        )
    return executor
