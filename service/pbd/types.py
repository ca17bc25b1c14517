"""Plain pbd types the dataplane works with: the request and result the edges (gRPC, HTTP,
BLS) convert to and from, and the request as validation prepared it for a worker. Records
only: ``pbd.validation`` builds the prepared ones; this module imports no other pbd module
at run time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from pbd.memory.client_shm import Region

# A request's sequence flags (sequence_start, sequence_end parameters), as the worker gets them.
SEQUENCE_START = 1
SEQUENCE_END = 2

# Request/response parameter values. ``Uint64`` marks the protocol's uint64_param, which Triton
# accepts for ``priority`` only.
ParamValue = Union[bool, int, str, float, "Uint64"]


@dataclass(frozen=True)
class Uint64:
    value: int


@dataclass(frozen=True)
class CudaSlice:
    """Where a client's CUDA region is: the worker opens ``ipc_handle`` once per generation."""

    device_id: int
    ipc_handle: bytes
    generation: int


@dataclass(frozen=True)
class ShmSlice:
    """Bytes in a client's registered region: the worker maps ``region`` itself."""

    region: str  # the worker-side name (file name + "#generation"); "" for a CUDA region
    offset: int  # from the start of the file (of the CUDA allocation)
    byte_size: int
    cuda: CudaSlice | None = None


@dataclass
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: memoryview | None  # the raw (wire-form) bytes
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # In device memory instead (a BLS call's GPU input in a CUDA pool block): data is None.
    device: ShmSlice | None = None
    # The bytes lie in a front end's arena (``pbd serve --frontends``), ``data`` is a view of
    # them: the worker maps that region instead of getting a copy.
    placed: ShmSlice | None = None


class LentInputs:
    """The arena blocks a front end lent for one request's inputs (``placed`` tensors).

    Each Execute that describes them holds them (``hold``) until the instance frees that
    batch's blocks (``give_back``); ``on_free`` runs once the request is over (``end``) and
    no hold is left: no worker reads those bytes any more, and the front end may reuse them."""

    __slots__ = ("on_free", "holds", "over")

    def __init__(self, on_free: Callable[[], None]) -> None:
        self.on_free: Callable[[], None] | None = on_free
        self.holds = 0
        self.over = False

    def hold(self) -> None:
        self.holds += 1

    def give_back(self) -> None:
        self.holds -= 1
        if self.over and not self.holds:
            self._free()

    def end(self) -> None:
        self.over = True
        if not self.holds:
            self._free()

    def _free(self) -> None:
        on_free, self.on_free = self.on_free, None
        if on_free is not None:
            on_free()


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
    # A step of an ensemble request the dataplane already admitted (pbd.ensemble): it runs
    # even while the daemon drains, as the request it belongs to does.
    internal: bool = False
    # Set by a front end that can send the answer itself as soon as the result is in (gRPC
    # ModelInfer, untraced: pbd.answer): the instance calls it where it reads the
    # worker's result, before the bookkeeping that follows (pbd.instance.inflight).
    respond: Callable[[InferResult], None] | None = None
    # Set by a consumer of the request's responses that handles each where it is read (gRPC
    # ModelStreamInfer: encoded and written at once): the listener of its ResponseStream
    # (pbd.responses), called with each StreamResult.
    on_response: Callable[[Any], None] | None = None
    # A request of ModelStreamInfer (not decoupled): a model that misused its response sender
    # and answered it twice is answered with the first response, as Triton's stream does
    # (ModelInfer answers Triton's "expected a single response, got 2").
    first_answer: bool = False
    # Inputs lent by a front end (``InputTensor.placed``): held while a worker may read them.
    lent: LentInputs | None = None

    @property
    def log_id(self) -> str:
        return self.id or "<id_unknown>"


@dataclass
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: memoryview
    # The shared-memory segment and offset ``data`` lies at ("" when it lies in none: a
    # client's region, or bytes the daemon made): what a front end maps to read it.
    region: str = ""
    offset: int = 0


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
    answered: bool = False  # sent to the client already, by its request's ``respond``

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def take_release(self) -> Callable[[], None] | None:
        """Hand the memory back later, elsewhere: the caller now owns what ``release`` would
        have done (a front end's answer, released when the front end has encoded it)."""
        release, self._release = self._release, None
        return release

    def __enter__(self) -> InferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# RepositoryModelLoad: a parameter named ``file:<path>`` carries a file of the model to load.
FILE_PREFIX = "file:"


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: str = ""
    state: str = ""
    reason: str = ""


@dataclass
class PreparedInput:
    name: str
    datatype: str
    shape: tuple[int, ...]  # as the model sees it (after reshape)
    data: memoryview | None  # None: the input is in client shared memory (``shm``)
    shm: ShmSlice | None = None


@dataclass
class PreparedRequest:
    """What the worker needs, already checked."""

    request: InferRequest
    inputs: list[PreparedInput]
    requested_outputs: list[str]
    parameters_json: str = "{}"
    correlation_id: int | str = 0
    flags: int = 0
    priority: int = 0
    timeout_us: int = 0
    extras: dict[str, ParamValue] = field(default_factory=dict)
    output_targets: dict[str, ShmSlice] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)  # held until the request ends
    # Streaming (pbd.responses): the caller's ResponseStream, for infer_stream; and what to call
    # when the caller gives up (set by the instance that sent the request to its worker).
    stream: Any = None
    on_cancel: Callable[[], None] | None = None


def batch_rows(batch: list[PreparedRequest], max_batch_size: int) -> int:
    """The batch dimension of an execute of ``batch`` (its size for a model without batching)."""
    if max_batch_size <= 0:
        return len(batch)
    return sum(request_batch_size(p, max_batch_size) for p in batch)


def request_batch_size(prepared: PreparedRequest, max_batch_size: int) -> int:
    """The batch dimension a request adds to an execute (1 for a model without batching)."""
    if max_batch_size <= 0 or not prepared.inputs:
        return 1
    shape = prepared.inputs[0].shape
    return shape[0] if shape else 1
