"""An instance's batches in its worker, from the Execute that carried each to the ExecuteResult
that answers it: their ids, the room they take in the instance's pipeline, and what each
result turns into.

Room is taken by the version's dispatch when it gives a request (or batch) to the instance
(``inflight += 1``) and given back here (``free_room``), when the result comes, the batch
fails before it was sent, or the worker dies; a caller that gives up does not free room its
request still takes in the worker.

What a result turns into (one outcome per request: :meth:`InFlightBatches.outcomes`) is worked
out by the caller's task once it resumes; or at once, where the result frame is read, for a
lone request of the default scheduler (which hands each answer on as it comes) whose front end
can send the answer itself (``InferRequest.respond``: gRPC ModelInfer, untraced). That request
is answered before its task even resumes, and the bookkeeping after it (statistics, the
coroutines unwinding, the call's own end) no longer stands between the worker's answer and
the client's.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pbd.errors import Code, PbdError
from pbd.instance.memory import InstanceMemory
from pbd.instance.requests import SentRequests
from pbd.modelconfig.model import ModelConfig
from pbd.stats import ModelStats
from pbd.tracing.request import batch_computed
from pbd.types import InferResult, OutputTensor, PreparedRequest, batch_rows
from pbd.worker_client.describe import Held
from pbd.worker_client.error_log import ErrorBucket, log_failed_batch
from pbd.worker_client.releases import PendingReleases
from pbd.worker_client.results import failed_share, json_params
from pbd_wire import worker_pb2 as wpb


@dataclass(slots=True)
class InFlight:
    future: asyncio.Future[wpb.ExecuteResult]
    blocks: list[Held]  # the inputs' blocks in the instance's arena
    batch: list[PreparedRequest]
    request_ids: list[int]
    copy_ns: int  # building the Execute, inputs copied
    early: bool = False  # a lone request answered where its result is read
    outcomes: list[Any] | None = None  # worked out already (``early``)

    @classmethod
    def of(
        cls,
        future: asyncio.Future[wpb.ExecuteResult],
        blocks: list[Held],
        batch: list[PreparedRequest],
        request_ids: list[int],
        copy_ns: int,
        in_order: bool,
    ) -> InFlight:
        """``in_order``: the caller's scheduler orders the answers (no early one)."""
        early = not in_order and len(batch) == 1 and batch[0].request.respond is not None
        return cls(future, blocks, batch, request_ids, copy_ns, early)


class InFlightBatches:
    def __init__(
        self,
        *,
        config: ModelConfig,
        version: int,
        description: str,
        span_attributes: dict[str, object],
        memory: InstanceMemory,
        requests: SentRequests,
        releases: PendingReleases,
        stats: ModelStats,
        on_capacity: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.version_text = str(version)  # in every result
        self.description = description  # "instance 'm_0' of model 'm' version 1"
        self.span_attributes = span_attributes
        self.memory = memory
        self.requests = requests
        self.releases = releases
        self.stats = stats
        self.on_capacity = on_capacity  # room in the pipeline was given back
        self.inflight = 0  # room taken: batches given to the instance and not answered yet
        self.error_bucket = ErrorBucket()  # how many failed batches it may still log
        self._ids = itertools.count(1)
        self._pending: dict[int, InFlight] = {}  # by batch id

    def __len__(self) -> int:
        return len(self._pending)

    # -- sending -----------------------------------------------------------------------------

    def new_id(self) -> int:
        return next(self._ids)

    def sent(self, batch_id: int, flight: InFlight) -> None:
        """``flight`` is about to leave (its Execute carries ``batch_id``)."""
        self._pending[batch_id] = flight

    def not_sent(self, batch_id: int) -> None:
        """The Execute of ``batch_id`` never left: its inputs are freed, its room given back."""
        flight = self._pending.pop(batch_id)
        self.memory.free(flight.blocks)
        self.requests.forget(flight.request_ids)
        self.free_room()

    def free_room(self) -> None:
        self.inflight -= 1
        if self.on_capacity is not None:
            self.on_capacity()

    # -- the result --------------------------------------------------------------------------

    def on_result(self, result: wpb.ExecuteResult) -> None:
        """The worker's ExecuteResult, as its link reads it."""
        batch_id = result.batch_id
        flight = self._pending.pop(batch_id, None)
        if flight is None:
            return
        if flight.future.done():  # the caller was cancelled; nobody reads the outputs
            self.release(batch_id, flight.blocks)
        elif flight.early:
            self._settle_early(flight, result)
        else:
            flight.future.set_result(result)
        self.free_room()

    def settle(self, flight: InFlight, result: wpb.ExecuteResult) -> list[Any]:
        """The batch's outcomes (see :meth:`outcomes`), a lone early request answered first,
        then its traces and statistics recorded."""
        batch = flight.batch
        outcomes = self.outcomes(batch, result, flight.blocks, flight.request_ids)
        if flight.early and isinstance(outcomes[0], InferResult):
            respond = batch[0].request.respond
            assert respond is not None
            respond(outcomes[0])
        traces = [p.request.trace for p in batch if p.request.trace is not None]
        if traces:
            batch_computed(traces, result, self.span_attributes)
        ns = (flight.copy_ns + result.input_ns, result.infer_ns, result.output_ns)
        size = batch_rows(batch, self.config.max_batch_size)
        self.stats.executed(len(batch), *ns, size, failed_share(batch, outcomes, self.config))
        return outcomes

    def _settle_early(self, flight: InFlight, result: wpb.ExecuteResult) -> None:
        """Settle ``flight`` where its result is read (its future not resolved yet). A failure
        here fails the request through its future, as it would have in the caller's task."""
        try:
            flight.outcomes = self.settle(flight, result)
        except Exception as exc:  # noqa: BLE001 - raised again in the caller's task
            flight.future.set_exception(exc)
            return
        flight.future.set_result(result)

    def outcomes(
        self,
        batch: list[PreparedRequest],
        result: wpb.ExecuteResult,
        blocks: list[Held],
        request_ids: list[int],
    ) -> list[Any]:
        """One entry per request: an InferResult, a PbdError, or (answered later by the
        response sender) what ``SentRequests.resolve`` waits for."""
        responses = result.responses[:]  # a list (faster than protobuf's iterator)
        if len(responses) == 1 and len(request_ids) == 1:
            only = responses[0]
            lone = self._lone(batch[0], request_ids[0], only, result.batch_id, blocks)
            if lone is not None:
                return [lone]
            by_id = {request_ids[0]: only} if only.request_id == request_ids[0] else {}
        else:
            by_id = {r.request_id: r for r in responses}
        outstanding = 1  # held by this loop, so a stream that already ended cannot free early
        results: list[Any] = []
        # The worker keeps blocks for the batch only for outputs it wrote into its own arena
        # (not those written into a client's region, nor an input returned in place); a batch
        # with none needs no Release. Found out in the loop below, before anything is released.
        worker_holds = len(by_id) != len(request_ids)  # a response for no request: be safe

        def release_one() -> None:
            nonlocal outstanding
            outstanding -= 1
            if outstanding == 0:
                self.release(result.batch_id, blocks, worker_holds)

        requests = self.requests
        failed: wpb.Error | None = None
        for request_id, prepared in zip(request_ids, batch, strict=True):
            response = by_id.get(request_id)
            if response is None:
                results.append(requests.answered(
                    request_id, PbdError(Code.INTERNAL, f"{self.description} returned no response")
                ))  # fmt: skip
            elif response.rescheduled:
                worker_holds = True
                results.append(requests.rescheduled(request_id, self.config.iterative_sequence))
            elif response.streamed:
                worker_holds = True
                outstanding += 1  # the batch's inputs stay until its final response
                results.append(requests.streamed(request_id, release_one))
            elif response.HasField("error"):
                # An output that failed after others were written into the arena leaves their
                # blocks held by the worker (the response carries none of them): tell it.
                worker_holds = True
                err = response.error
                if failed is None:
                    failed = err
                error = PbdError(Code.parse(err.code), err.message)
                results.append(requests.answered(request_id, error))
            else:
                try:
                    outputs, holds = self._outputs(prepared, response)
                except ValueError as exc:
                    worker_holds = True
                    error = PbdError(Code.INTERNAL, f"{self.description}: {exc}")
                    results.append(requests.answered(request_id, error))
                    continue
                worker_holds = worker_holds or holds
                outstanding += 1
                answer = self._result(prepared, outputs, response, release_one)
                results.append(requests.answered(request_id, answer))
        release_one()
        if failed is not None:
            log_failed_batch(self.error_bucket, self.description, failed)
        return results

    def _lone(
        self,
        prepared: PreparedRequest,
        request_id: int,
        response: wpb.Response,
        batch_id: int,
        blocks: list[Held],
    ) -> InferResult | Any | None:
        """:meth:`outcomes` of a batch of one request answered with outputs, as the walk
        below would give it, without the walk (nearly every request of a model that does not
        batch); None for anything else (an error, a stream, a bad output: the walk says)."""
        if (
            response.request_id != request_id
            or response.rescheduled
            or response.streamed
            or response.HasField("error")
        ):
            return None
        try:
            outputs, worker_holds = self._outputs(prepared, response)
        except ValueError:
            return None
        # The result is the batch's only holder: its release is the batch's.
        done = functools.partial(self.release, batch_id, blocks, worker_holds)
        return self.requests.answered(request_id, self._result(prepared, outputs, response, done))

    def _outputs(
        self, prepared: PreparedRequest, response: wpb.Response
    ) -> tuple[list[OutputTensor], bool]:
        """Views of ``response``'s outputs, and whether the worker holds blocks for them
        (outputs in its own arena); ValueError when one cannot be mapped."""
        memory = self.memory
        prefix = memory.output_prefix
        targets = prepared.output_targets
        outputs: list[OutputTensor] = []
        worker_holds = False
        for ref in response.outputs[:]:
            outputs.append(memory.output(ref, ref.name in targets))
            if ref.region.startswith(prefix):
                worker_holds = True
        return outputs, worker_holds

    def _result(
        self,
        prepared: PreparedRequest,
        outputs: list[OutputTensor],
        response: wpb.Response,
        release: Callable[[], None],
    ) -> InferResult:
        return InferResult(
            model_name=self.config.name,
            model_version=self.version_text,
            id=prepared.request.id,
            outputs=outputs,
            parameters=json_params(response.parameters_json),
            _release=release,
        )

    def release(self, batch_id: int, blocks: list[Held], worker_holds: bool = True) -> None:
        """Free the inputs now; tell the worker with the next Execute, or after a moment,
        unless it holds nothing for the batch (no output in its arena)."""
        self.memory.free(blocks)
        if worker_holds:
            self.releases.add(batch_id)

    # -- a caller that gives up, a worker that goes ----------------------------------------------

    def abandon(self, batch_id: int, flight: InFlight) -> None:
        """The caller gave up while its batch was in the worker: the worker is told, and the
        batch's memory comes back when (or, if it came already, now that) its result is in."""
        future = flight.future
        if flight.outcomes is not None:
            self._abandon_settled(flight)
            return
        if not future.done():
            future.cancel()  # the result frame then releases the batch unread
        elif not future.cancelled() and future.exception() is None:
            self.release(batch_id, flight.blocks)
        for request_id in flight.request_ids:
            self.requests.cancel(request_id)
        self.requests.forget(flight.request_ids)

    def _abandon_settled(self, flight: InFlight) -> None:
        """The caller gave up after its batch was settled early: outputs nobody will read go
        back, requests still answered through their response sender are cancelled in the
        worker."""
        assert flight.outcomes is not None
        for request_id, outcome in zip(flight.request_ids, flight.outcomes, strict=True):
            if isinstance(outcome, InferResult):
                outcome.release()
            elif not isinstance(outcome, PbdError):
                self.requests.cancel(request_id)

    def fail_all(self, error: PbdError) -> None:
        """The worker is gone: every batch it had fails with ``error``, and its room is free."""
        pending, self._pending = self._pending, {}
        for flight in pending.values():
            if not flight.future.done():
                flight.future.set_exception(error)
            self.memory.free(flight.blocks)
            self.free_room()
        self.requests.fail_all(error)


