"""pbd.instances.inflight: a lone request of the default scheduler whose edge can answer
itself is answered where its result is read, before its future resolves; everything else
is settled by the caller's task, as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from instance_samples import FakeInstance
from scheduling_samples import prepared

from pbd.errors import PbdError
from pbd.instances.inflight import InFlight, abandon_settled, settle, settle_early
from pbd.instances.memory import InstanceMemory
from pbd.settings import Settings
from pbd.types import InferResult, PreparedRequest
from pbd_wire import worker_pb2 as wpb


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[FakeInstance]:
    memory = InstanceMemory("pbdtest-inflight", Settings(shm_dir=tmp_path))
    loop = asyncio.new_event_loop()  # futures need one; nothing runs on it
    asyncio.set_event_loop(loop)
    yield FakeInstance(memory)
    asyncio.set_event_loop(None)
    loop.close()
    memory.close()


def _flight(
    instance: FakeInstance, batch: list[PreparedRequest], in_order: bool
) -> tuple[InFlight, wpb.ExecuteResult]:
    ids = [instance.streams.register(p) for p in batch]
    future: asyncio.Future[wpb.ExecuteResult] = asyncio.get_event_loop().create_future()
    result = wpb.ExecuteResult(batch_id=3, infer_ns=5)
    for request_id in ids:
        result.responses.add(request_id=request_id)
    return InFlight.of(future, [], batch, ids, 10, in_order), result


def _answering(answers: list[InferResult]) -> PreparedRequest:
    request = prepared(1)
    request.request.respond = answers.append
    return request


def test_a_lone_request_of_the_default_scheduler_is_answered_before_its_future(
    instance: FakeInstance,
) -> None:
    answers: list[InferResult] = []
    flight, result = _flight(instance, [_answering(answers)], in_order=False)
    assert flight.early
    settle_early(instance, flight, result)  # type: ignore[arg-type]
    assert flight.outcomes is not None and answers == [flight.outcomes[0]]
    assert flight.future.result() is result
    assert instance.stats.execution_count == 1 and instance.stats.inference_count == 1


@pytest.mark.parametrize("in_order", [True, False])
def test_batches_ordered_or_shared_and_edges_that_cannot_answer_wait_for_the_task(
    instance: FakeInstance, in_order: bool
) -> None:
    answers: list[InferResult] = []
    # A batcher that orders its answers; or two requests in one batch, one whose edge does
    # not answer itself.
    batch = [_answering(answers)] if in_order else [_answering(answers), prepared(2)]
    flight, result = _flight(instance, batch, in_order)
    assert not flight.early
    outcomes = settle(instance, flight, result)  # type: ignore[arg-type]
    assert answers == [] and all(isinstance(o, InferResult) for o in outcomes)
    assert not InFlight.of(flight.future, [], [prepared(3)], [9], 0, False).early


def test_an_error_is_left_to_the_task(instance: FakeInstance) -> None:
    answers: list[InferResult] = []
    flight, result = _flight(instance, [_answering(answers)], in_order=False)
    result.responses[0].error.code = "INVALID_ARG"
    result.responses[0].error.message = "no"
    settle_early(instance, flight, result)  # type: ignore[arg-type]
    assert answers == []
    assert flight.outcomes is not None and isinstance(flight.outcomes[0], PbdError)
    assert instance.stats.execution_count == 0  # every request failed: no execution


def test_a_failure_while_settling_fails_the_request_through_its_future(
    instance: FakeInstance,
) -> None:
    def broken(result: InferResult) -> None:
        raise RuntimeError("edge broke")

    request = prepared(1)
    request.request.respond = broken
    flight, result = _flight(instance, [request], in_order=False)
    settle_early(instance, flight, result)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="edge broke"):
        flight.future.result()


def test_a_caller_that_gives_up_after_settling_hands_its_outputs_back(
    instance: FakeInstance,
) -> None:
    flight, result = _flight(instance, [prepared(1)], in_order=False)
    flight.outcomes = settle(instance, flight, result)  # type: ignore[arg-type]
    assert instance.released == []
    abandon_settled(instance, flight)  # type: ignore[arg-type]
    assert [batch_id for batch_id, _ in instance.released] == [3]
