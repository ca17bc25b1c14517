"""pbd.instances.messages.batch_results: one result per request, and whether the worker must be
told (Release) when the daemon is done with the batch: only when it holds blocks for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from instance_samples import FakeInstance
from scheduling_samples import prepared

from pbd.errors import PbdError
from pbd.instances.memory import InstanceMemory
from pbd.instances.messages import batch_results
from pbd.settings import Settings
from pbd.types import InferResult, ShmSlice
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Arena


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[FakeInstance]:
    memory = InstanceMemory("pbdtest-msg", Settings(shm_dir=tmp_path))
    yield FakeInstance(memory)
    memory.close()


def _run(instance: FakeInstance, response: wpb.Response, targets: dict[str, ShmSlice]) -> Any:
    request = prepared(0, output_targets=targets)
    request_id = instance.streams.register(request)
    response.request_id = request_id
    result = wpb.ExecuteResult(batch_id=7, responses=[response])
    (answer,) = batch_results(instance, [request], result, [], [request_id])  # type: ignore[arg-type]
    return answer


def test_outputs_written_into_a_clients_region_need_no_release(instance: FakeInstance) -> None:
    response = wpb.Response(outputs=[wpb.TensorRef(name="Y", datatype="FP32", shape=[1, 2],
                                                   region="client#1:2:3", nbytes=8)])  # fmt: skip
    answer = _run(instance, response, {"Y": ShmSlice("client#1:2:3", 0, 8)})
    assert isinstance(answer, InferResult) and answer.outputs[0].data.nbytes == 0
    answer.release()
    assert instance.released == [(7, False)]


def test_outputs_in_the_workers_arena_are_released_to_it(
    instance: FakeInstance, tmp_path: Path
) -> None:
    worker_arena = Arena(instance.memory.output_prefix, 4096, 4096, shm_dir=str(tmp_path))
    try:
        block = worker_arena.allocate(8)
        ref = wpb.TensorRef(name="Y", datatype="FP32", shape=[1, 2], nbytes=8,
                            region=block.segment.name, offset=block.offset)  # fmt: skip
        answer = _run(instance, wpb.Response(outputs=[ref]), {})
        assert isinstance(answer, InferResult) and answer.outputs[0].data.nbytes == 8
        assert instance.released == []  # not while the answer still reads the worker's bytes
        answer.release()
        assert instance.released == [(7, True)]
    finally:
        instance.memory.worker_segments.close()
        worker_arena.close()


def test_an_error_response_still_tells_the_worker(instance: FakeInstance) -> None:
    """A request that failed on its second output holds the first one's block in the worker,
    though the response names none: the worker must hear that the batch is done."""
    response = wpb.Response(error=wpb.Error(code="RESOURCE_EXHAUSTED", message="full"))
    answer = _run(instance, response, {})
    assert isinstance(answer, PbdError) and answer.message == "full"
    assert instance.released == [(7, True)]
