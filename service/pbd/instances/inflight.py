"""A batch in its worker, from the Execute that carried it to the ExecuteResult that answers it.

What the result turns into (one outcome per request: ``pbd.instances.messages.batch_results``)
is worked out by the caller's task once it resumes; or at once, where the result frame is
read, for a lone request of the default scheduler (which hands each answer on as it comes)
whose front end can send the answer itself (``InferRequest.respond``: gRPC ModelInfer,
untraced). That request is answered before its task even resumes, and the bookkeeping after
it (statistics, the coroutines unwinding, the call's own end) no longer stands between the
worker's answer and the client's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from pbd.errors import PbdError
from pbd.instances.messages import ExecutingInstance, batch_results, failed_share
from pbd.stats import ModelStats
from pbd.tracing.request import batch_computed
from pbd.types import InferResult, PreparedRequest, batch_rows
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Block


class SettlingInstance(ExecutingInstance, Protocol):
    """What settling a batch uses of its instance beyond building its messages."""

    @property
    def stats(self) -> ModelStats: ...
    @property
    def span_attributes(self) -> dict[str, object]: ...


@dataclass(slots=True)
class InFlight:
    future: asyncio.Future[wpb.ExecuteResult]
    blocks: list[Block]  # the inputs' blocks in the instance's arena
    batch: list[PreparedRequest]
    request_ids: list[int]
    copy_ns: int  # building the Execute, inputs copied
    early: bool = False  # a lone request answered where its result is read
    outcomes: list[Any] | None = None  # worked out already (``early``)

    @classmethod
    def of(
        cls,
        future: asyncio.Future[wpb.ExecuteResult],
        blocks: list[Block],
        batch: list[PreparedRequest],
        request_ids: list[int],
        copy_ns: int,
        in_order: bool,
    ) -> InFlight:
        """``in_order``: the caller's scheduler orders the answers (no early one)."""
        early = not in_order and len(batch) == 1 and batch[0].request.respond is not None
        return cls(future, blocks, batch, request_ids, copy_ns, early)


def settle(instance: SettlingInstance, flight: InFlight, result: wpb.ExecuteResult) -> list[Any]:
    """The batch's outcomes (see ``batch_results``), a lone early request answered first, then
    its traces and statistics recorded."""
    batch = flight.batch
    outcomes = batch_results(instance, batch, result, flight.blocks, flight.request_ids)
    if flight.early and isinstance(outcomes[0], InferResult):
        respond = batch[0].request.respond
        assert respond is not None
        respond(outcomes[0])
    traces = [p.request.trace for p in batch if p.request.trace is not None]
    if traces:
        batch_computed(traces, result, instance.span_attributes)
    ns = (flight.copy_ns + result.input_ns, result.infer_ns, result.output_ns)
    size = batch_rows(batch, instance.config.max_batch_size)
    instance.stats.executed(len(batch), *ns, size, failed_share(batch, outcomes, instance.config))
    return outcomes


def settle_early(instance: SettlingInstance, flight: InFlight, result: wpb.ExecuteResult) -> None:
    """Settle ``flight`` where its result is read (its future not resolved yet). A failure
    here fails the request through its future, as it would have in the caller's task."""
    try:
        flight.outcomes = settle(instance, flight, result)
    except Exception as exc:  # noqa: BLE001 - raised again in the caller's task
        flight.future.set_exception(exc)
        return
    flight.future.set_result(result)


def abandon_settled(instance: SettlingInstance, flight: InFlight) -> None:
    """The caller gave up after its batch was settled early: outputs nobody will read go back,
    requests still answered through their response sender are cancelled in the worker."""
    assert flight.outcomes is not None
    for request_id, outcome in zip(flight.request_ids, flight.outcomes, strict=True):
        if isinstance(outcome, InferResult):
            outcome.release()
        elif not isinstance(outcome, PbdError):
            instance.streams.cancel(request_id)
