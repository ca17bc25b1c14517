"""One step of an ensemble request, run on its model as any request is.

The step's request goes through ``DataPlane.infer`` (``infer_stream`` when the step model is
decoupled): validation against the step model's config, its scheduler (queue, dynamic
batching), one of its instances, its statistics, and a trace whose server span is a child of
the ensemble request's. Tensors pass without a copy wherever they already lie in shared
memory: a step's output is named to the next step's worker as a slice of the segment the
producing worker wrote it into (the worker maps that segment), and an ensemble input that
came in a client's registered region is named there. Only an ensemble input that came inside
the request message is copied, once per step that reads it, into that step's instance arena,
as any request's input is. An ensemble output the client aimed at its registered region is
written there by the step that produces it (unless a later step reads it too).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from pbd.errors import PbdError
from pbd.instance.memory import locate
from pbd.modelconfig.ensemble import Step
from pbd.tracing.request import RequestTrace
from pbd.types import (
    InferRequest,
    InferResult,
    InputTensor,
    OutputTensor,
    PreparedInput,
    RequestedOutput,
    ShmSlice,
)

if TYPE_CHECKING:
    from pbd.dataplane import DataPlane

# An ensemble tensor: one of the request's inputs, or an output of a step.
Tensor = PreparedInput | OutputTensor
SPAN_METHOD = "EnsembleStep"


def step_input(name: str, tensor: Tensor) -> InputTensor:
    """``tensor`` as the step input ``name``: by reference where it lies in shared memory."""
    if isinstance(tensor, PreparedInput):
        if tensor.shm is not None:  # the client's registered region, held by the request
            return InputTensor(name, tensor.datatype, tensor.shape, None, device=tensor.shm)
        return InputTensor(name, tensor.datatype, tensor.shape, tensor.data)
    where = locate(tensor.data) if len(tensor.data) else None
    if where is None:
        return InputTensor(name, tensor.datatype, tensor.shape, tensor.data)
    region, offset = where
    slice_ = ShmSlice(region, offset, len(tensor.data))
    return InputTensor(name, tensor.datatype, tensor.shape, None, device=slice_)


def step_trace(parent: RequestTrace | None, step: Step, start_ns: int) -> RequestTrace | None:
    """The step's trace, a child of the ensemble request's server span (if it is traced)."""
    if parent is None:
        return None
    flags = "01" if parent.sampled else "00"
    traceparent = f"00-{parent.trace_id:032x}-{parent.server_id:016x}-{flags}"
    return RequestTrace(
        parent.tracing,
        method=SPAN_METHOD,
        model=step.model_name,
        version=step.version_text,
        traceparent=traceparent,
        start_ns=start_ns,
        system="ensemble",
    )


async def run_step(
    dataplane: DataPlane,
    step: Step,
    inputs: Sequence[InputTensor],
    outputs: Sequence[RequestedOutput],
    parent: InferRequest,
) -> AsyncIterator[InferResult]:
    """Every response of ``step`` (one for a non-decoupled model), as results the caller
    releases. A step's error is raised. ``outputs``: empty for all of them."""
    request = InferRequest(
        model_name=step.model_name,
        model_version=step.version_text,
        id=parent.id,
        inputs=list(inputs),
        outputs=list(outputs),
        parameters=dict(parent.parameters),
        internal=True,
    )
    trace = request.trace = step_trace(parent.trace, step, time.time_ns())
    try:
        if dataplane.is_decoupled(request):
            async for item in dataplane.infer_stream(request):
                if item.error is not None:
                    raise item.error
                if item.result is not None:
                    yield item.result
        else:
            yield await dataplane.infer(request)
    except PbdError as exc:
        if trace is not None:
            trace.finish(2, exc.message)  # 2: gRPC's UNKNOWN, as BLS calls report theirs
            trace = None
        raise
    finally:
        if trace is not None:
            trace.finish()
