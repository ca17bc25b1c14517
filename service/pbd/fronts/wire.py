"""The front-end protocol's inference messages (``protos/pbd/_proto/front.proto``) made from
and turned into pbd's records: pure functions, one module for both ends, tested without
processes. The front end builds ``Infer`` from the request it parsed and reads ``Answer``
back into the result it encodes; the daemon does the reverse."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pbd._proto import front_pb2 as fpb
from pbd.errors import Code, PbdError
from pbd.grpc.convert import params_from_pb, params_to_pb
from pbd.types import (
    InferRequest,
    InferResult,
    InputTensor,
    OutputTensor,
    RequestedOutput,
    ShmSlice,
)
from pbd_wire.framing import encode_frame

# (segment, offset, nbytes) -> a view of that segment's bytes; ValueError when it is not
# one the caller may map or the range is outside it.
View = Callable[[str, int, int], memoryview]
# Where one input's bytes were placed: (segment, offset, nbytes); None: the request carries no
# bytes for it (a client's shared-memory region).
Place = tuple[str, int, int] | None
_EMPTY = memoryview(b"")


@dataclass(frozen=True, slots=True)
class TraceAsk:
    """What the daemon needs to trace a request it decides to sample (its settings are one)."""

    method: str
    system: str
    start_ns: int
    traceparent: str


def infer_frame(
    call: int,
    request: InferRequest,
    places: Sequence[Place],
    *,
    stream: bool,
    trace: TraceAsk | None,
    release: Sequence[int] = (),
) -> bytes:
    """The framed ``Infer`` of ``request``, its inputs where ``places`` says."""
    message = fpb.FrontToDaemon()
    infer = message.infer
    infer.call = call
    infer.model_name = request.model_name
    if request.model_version:
        infer.model_version = request.model_version
    if request.id:
        infer.id = request.id
    for tensor, place in zip(request.inputs, places, strict=True):
        item = infer.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            params_to_pb(tensor.parameters, item.parameters)
        if place is not None:
            item.has_data = True
            item.region, item.offset, item.nbytes = place
    for output in request.outputs:
        wanted = infer.outputs.add(name=output.name)
        if output.parameters:
            params_to_pb(output.parameters, wanted.parameters)
    if request.parameters:
        params_to_pb(request.parameters, infer.parameters)
    if stream:
        infer.stream = True
    if request.first_answer:
        infer.first_answer = True
    if trace is not None:
        infer.method, infer.system, infer.start_ns = trace.method, trace.system, trace.start_ns
        if trace.traceparent:
            infer.traceparent = trace.traceparent
    if release:
        infer.release.extend(release)
    return encode_frame(message.SerializeToString())


def request_from_infer(infer: fpb.Infer, view: View) -> InferRequest:
    """The daemon's request: each input's bytes a view of the front end's arena, ``placed``
    there (the worker maps it). ValueError when an input names bytes it cannot have."""
    inputs = []
    for item in infer.inputs:
        data: memoryview | None = None
        placed: ShmSlice | None = None
        if item.has_data:
            if item.nbytes:
                data = view(item.region, item.offset, item.nbytes)
                placed = ShmSlice(item.region, item.offset, item.nbytes)
            else:
                data = _EMPTY
        inputs.append(
            InputTensor(
                item.name,
                item.datatype,
                tuple(item.shape),
                data,
                params_from_pb(item.parameters),
                placed=placed,
            )
        )
    return InferRequest(
        model_name=infer.model_name,
        model_version=infer.model_version,
        id=infer.id,
        inputs=inputs,
        outputs=[RequestedOutput(o.name, params_from_pb(o.parameters)) for o in infer.outputs],
        parameters=params_from_pb(infer.parameters),
        first_answer=infer.first_answer,
    )


def trace_ask(infer: fpb.Infer) -> TraceAsk:
    return TraceAsk(infer.method, infer.system or "grpc", infer.start_ns, infer.traceparent)


def answer_frame(
    call: int,
    result: InferResult | None,
    *,
    error: PbdError | None = None,
    final: bool = True,
    hold: int = 0,
    inputs_free: bool = False,
) -> bytes:
    """The framed ``Answer``: ``result``'s outputs as descriptors of where they lie."""
    message = fpb.DaemonToFront()
    answer = message.answer
    answer.call = call
    if final:
        answer.final = True
    if inputs_free:
        answer.inputs_free = True
    if error is not None:
        answer.error.code, answer.error.message = error.code.value, error.message
        if error.before_model:
            answer.before_model = True
    if result is not None:
        answer.response = True
        answer.model_name, answer.model_version = result.model_name, result.model_version
        if result.id:
            answer.id = result.id
        for index, tensor in enumerate(result.outputs):
            ref = answer.outputs.add(name=tensor.name, datatype=tensor.datatype)
            ref.shape.extend(tensor.shape)
            nbytes = len(tensor.data)
            if tensor.region:
                ref.region, ref.offset, ref.nbytes = tensor.region, tensor.offset, nbytes
            elif nbytes:  # bytes in no segment: they travel in the frame
                answer.inline[index] = bytes(tensor.data)
        if result.parameters:
            params_to_pb(result.parameters, answer.parameters)
        if hold:
            answer.hold = hold
    return encode_frame(message.SerializeToString())


def result_from_answer(answer: fpb.Answer, view: View) -> InferResult:
    """The front end's result: outputs are views of the segments they lie in (release it to
    hand them back)."""
    outputs = []
    inline = answer.inline
    for index, ref in enumerate(answer.outputs):
        if ref.nbytes:
            data = view(ref.region, ref.offset, ref.nbytes)
        elif inline and index in inline:
            data = memoryview(inline[index])
        else:
            data = _EMPTY
        outputs.append(OutputTensor(ref.name, ref.datatype, tuple(ref.shape), data))
    return InferResult(
        model_name=answer.model_name,
        model_version=answer.model_version,
        id=answer.id,
        outputs=outputs,
        parameters=params_from_pb(answer.parameters),
    )


def error_from_answer(answer: fpb.Answer) -> PbdError:
    error = PbdError(Code.parse(answer.error.code), answer.error.message)
    error.before_model = answer.before_model
    return error
