"""pbd.instance.inflight: an instance's batches in its worker, with its real parts and no worker.

A lone request of the default scheduler whose edge can answer itself is answered where its
result is read, before its future resolves; everything else is settled by the caller's task.
Each result frees the room its batch took; each request gets one outcome; the worker is told
(Release) when the daemon is done with a batch only when it holds blocks for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from instance_samples import Parts
from scheduling_samples import prepared

from pbd.errors import Code, PbdError
from pbd.instance.inflight import InFlight
from pbd.types import InferResult, PreparedRequest, ShmSlice
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Arena

BATCH_ID = 3


def run(shm_dir: Path, scenario: Callable[[Parts], Awaitable[None]]) -> None:
    """``scenario`` in a running loop (releases wait on its timer), its parts closed after."""
    parts = Parts(shm_dir)

    async def main() -> None:
        try:
            await scenario(parts)
        finally:
            parts.close()

    asyncio.run(main())


def send(
    parts: Parts, batch: list[PreparedRequest], in_order: bool, batch_id: int = BATCH_ID
) -> tuple[InFlight, wpb.ExecuteResult]:
    """``batch`` given to the instance (its room taken, as the dispatch does) and sent; the
    result the worker will answer it with."""
    ids = [parts.requests.register(p) for p in batch]
    future: asyncio.Future[wpb.ExecuteResult] = asyncio.get_running_loop().create_future()
    flight = InFlight.of(future, [], batch, ids, 10, in_order)
    parts.batches.inflight += 1
    parts.batches.sent(batch_id, flight)
    result = wpb.ExecuteResult(batch_id=batch_id, infer_ns=5)
    for request_id in ids:
        result.responses.add(request_id=request_id)
    return flight, result


def answering(answers: list[InferResult]) -> PreparedRequest:
    request = prepared(1)
    request.request.respond = answers.append
    return request


def test_a_lone_request_of_the_default_scheduler_is_answered_before_its_future(
    tmp_path: Path,
) -> None:
    async def scenario(parts: Parts) -> None:
        answers: list[InferResult] = []
        flight, result = send(parts, [answering(answers)], in_order=False)
        assert flight.early
        parts.batches.on_result(result)
        assert flight.outcomes is not None and answers == [flight.outcomes[0]]
        assert flight.future.result() is result
        stats = parts.batches.stats
        assert stats.execution_count == 1 and stats.inference_count == 1
        assert parts.batches.inflight == 0 and parts.capacity == 1  # its room given back
        assert len(parts.batches) == 0

    run(tmp_path, scenario)


def test_batches_ordered_or_shared_and_edges_that_cannot_answer_wait_for_the_task(
    tmp_path: Path,
) -> None:
    async def scenario(parts: Parts) -> None:
        for in_order in (True, False):
            answers: list[InferResult] = []
            # A batcher that orders its answers; or two requests in one batch, one whose edge
            # does not answer itself.
            batch = [answering(answers)] if in_order else [answering(answers), prepared(2)]
            flight, result = send(parts, batch, in_order)
            assert not flight.early
            parts.batches.on_result(result)
            assert flight.outcomes is None and flight.future.result() is result
            outcomes = parts.batches.settle(flight, result)
            assert answers == [] and all(isinstance(o, InferResult) for o in outcomes)
        assert not InFlight.of(flight.future, [], [prepared(3)], [9], 0, False).early

    run(tmp_path, scenario)


def test_an_error_is_left_to_the_task(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        answers: list[InferResult] = []
        flight, result = send(parts, [answering(answers)], in_order=False)
        result.responses[0].error.code = "INVALID_ARG"
        result.responses[0].error.message = "no"
        parts.batches.on_result(result)
        assert answers == []
        assert flight.outcomes is not None and isinstance(flight.outcomes[0], PbdError)
        assert parts.batches.stats.execution_count == 0  # every request failed: no execution

    run(tmp_path, scenario)


def test_a_failure_while_settling_fails_the_request_through_its_future(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        def broken(result: InferResult) -> None:
            raise RuntimeError("edge broke")

        request = prepared(1)
        request.request.respond = broken
        flight, result = send(parts, [request], in_order=False)
        parts.batches.on_result(result)
        try:
            flight.future.result()
        except RuntimeError as exc:
            assert str(exc) == "edge broke"
        else:
            raise AssertionError("the future should hold the edge's error")

    run(tmp_path, scenario)


def test_a_caller_that_gives_up_after_settling_hands_its_outputs_back(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        flight, result = send(parts, [prepared(1)], in_order=False)
        flight.blocks.append(parts.memory.arena.allocate(8))  # its input
        flight.outcomes = parts.batches.settle(flight, result)
        assert parts.memory.arena.used > 0
        parts.batches.abandon(BATCH_ID, flight)
        assert parts.memory.arena.used == 0

    run(tmp_path, scenario)


def test_a_caller_that_gives_up_before_the_result_cancels_it_in_the_worker(
    tmp_path: Path,
) -> None:
    async def scenario(parts: Parts) -> None:
        flight, result = send(parts, [prepared(1)], in_order=True)
        parts.batches.abandon(BATCH_ID, flight)
        assert flight.future.cancelled()
        (told,) = parts.told
        assert list(told.cancel.request_ids) == flight.request_ids
        assert len(parts.requests) == 0
        parts.batches.on_result(result)  # the result comes anyway: released unread
        assert parts.releases.take() == [BATCH_ID] and parts.batches.inflight == 0

    run(tmp_path, scenario)


def test_a_batch_that_never_left_frees_its_room(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        flight, _ = send(parts, [prepared(1)], in_order=False)
        parts.batches.not_sent(BATCH_ID)
        assert parts.batches.inflight == 0 and parts.capacity == 1
        assert len(parts.batches) == 0 and len(parts.requests) == 0
        assert not flight.future.done()  # the caller raises NotSent itself

    run(tmp_path, scenario)


def test_a_worker_that_goes_fails_every_batch_it_had(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        flights = [send(parts, [prepared(i)], True, batch_id=i)[0] for i in (1, 2)]
        parts.batches.fail_all(PbdError(Code.UNAVAILABLE, "worker gone"))
        for flight in flights:
            error = flight.future.exception()
            assert isinstance(error, PbdError) and error.message == "worker gone"
        assert parts.batches.inflight == 0 and len(parts.requests) == 0

    run(tmp_path, scenario)


# -- one outcome per request, and whether the worker must be told ------------------------------


def outcome(parts: Parts, response: wpb.Response, targets: dict[str, ShmSlice]) -> Any:
    request = prepared(0, output_targets=targets)
    request_id = parts.requests.register(request)
    response.request_id = request_id
    result = wpb.ExecuteResult(batch_id=7, responses=[response])
    (answer,) = parts.batches.outcomes([request], result, [], [request_id])
    return answer


def test_outputs_written_into_a_clients_region_need_no_release(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        region = "client#1:2:3"
        ref = wpb.TensorRef(name="Y", datatype="FP32", shape=[1, 2], region=region, nbytes=8)
        response = wpb.Response(outputs=[ref])
        answer = outcome(parts, response, {"Y": ShmSlice(region, 0, 8)})
        assert isinstance(answer, InferResult) and answer.outputs[0].data.nbytes == 0
        answer.release()
        assert parts.releases.take() == []

    run(tmp_path, scenario)


def test_outputs_in_the_workers_arena_are_released_to_it(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        arena = Arena(parts.memory.output_prefix, 4096, 4096)
        try:
            block = arena.allocate(8)
            ref = wpb.TensorRef(name="Y", datatype="FP32", shape=[1, 2], nbytes=8,
                                region=block.segment.name, offset=block.offset)  # fmt: skip
            answer = outcome(parts, wpb.Response(outputs=[ref]), {})
            assert isinstance(answer, InferResult) and answer.outputs[0].data.nbytes == 8
            assert answer.model_version == "1"
            assert parts.releases.take() == []  # not while the answer reads the worker's bytes
            answer.release()
            assert parts.releases.take() == [7]
        finally:
            parts.memory.worker_segments.close()
            arena.close()

    run(tmp_path, scenario)


def test_an_error_response_still_tells_the_worker(tmp_path: Path) -> None:
    """A request that failed on its second output holds the first one's block in the worker,
    though the response names none: the worker must hear that the batch is done."""

    async def scenario(parts: Parts) -> None:
        response = wpb.Response(error=wpb.Error(code="RESOURCE_EXHAUSTED", message="full"))
        answer = outcome(parts, response, {})
        assert isinstance(answer, PbdError) and answer.message == "full"
        assert parts.releases.take() == [7]

    run(tmp_path, scenario)


def test_a_missing_response_names_the_instance(tmp_path: Path) -> None:
    async def scenario(parts: Parts) -> None:
        request = prepared(0)
        request_id = parts.requests.register(request)
        result = wpb.ExecuteResult(batch_id=7)
        (answer,) = parts.batches.outcomes([request], result, [], [request_id])
        assert isinstance(answer, PbdError) and answer.code is Code.INTERNAL
        assert answer.message == "instance 'm_0' of model 'm' version 1 returned no response"

    run(tmp_path, scenario)
