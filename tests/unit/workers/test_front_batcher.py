"""Dynamic batches formed in the worker from its front links' Executes
(``pbd_worker.front_batcher``, ``BatchExecutor.run_parts``).

A real worker process, played to as in ``test_front_connections``: front ends are sockets of this
test, each sending one request per Execute as a front end does. The model answers each request
with OUT = IN * 2 and N, the number of requests its ``execute()`` got.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from test_front_connections import B0, B1, Start, Worker, start  # noqa: F401 - start is a fixture

from pbd_wire import worker_pb2 as wpb
from pbd_wire.batching import direct_batching

COUNTING = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            n = np.array([len(requests)], dtype=np.int32)
            out = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", x * 2), pb_utils.Tensor("N", n)]
                ))
            return out
    """
)
LONG_US = 30_000_000  # a delay no passing test waits out


@pytest.fixture
def batched(start: Start):  # type: ignore[no-untyped-def]  # noqa: F811
    def make(max_batch_size: int, delay_us: int = 0, preferred: list[int] | None = None) -> Worker:
        dynamic: dict[str, object] = {"max_queue_delay_microseconds": delay_us}
        if preferred:
            dynamic["preferred_batch_size"] = preferred
        config = {"max_batch_size": max_batch_size, "dynamic_batching": dynamic}
        return start(model=COUNTING, config=config)

    return make


def outputs(worker: Worker, response: wpb.Response) -> dict[str, list[float]]:
    found = {}
    for ref in response.outputs:
        view = worker.outputs.view(ref.region, ref.offset, ref.nbytes)
        dtype = np.int32 if ref.name == "N" else np.float32
        found[ref.name] = np.frombuffer(view, dtype).tolist()
    return found


def test_requests_of_two_front_ends_run_in_one_execute_each_answered_on_its_link(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(2, LONG_US)  # the first waits (the delay) until the second fills the batch
    first, second = worker.connect(0), worker.connect(1)
    first.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, shape=[1, 1])))
    second.send(worker.execute(B1 + 1, worker.request(B1 + 1, 2.0, shape=[1, 1])))
    a, b = first.read().result, second.read().result
    assert (a.batch_id, b.batch_id) == (B0 + 1, B1 + 1)
    assert [r.request_id for r in a.responses] == [B0 + 1]
    assert [r.request_id for r in b.responses] == [B1 + 1]
    assert outputs(worker, a.responses[0]) == {"OUT": [2.0], "N": [2]}
    assert outputs(worker, b.responses[0]) == {"OUT": [4.0], "N": [2]}
    # Both parts say so; the execution (2 rows) is counted by exactly one of them.
    assert a.merged and b.merged
    assert sorted((a.batch_rows, b.batch_rows)) == [0, 2]
    assert a.infer_ns == b.infer_ns
    assert first.silent() and second.silent() and worker.daemon.silent()


def test_a_preferred_size_goes_before_the_delay_and_the_rest_waits_for_the_next_batch(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(8, LONG_US, [2])
    front = worker.connect(0)
    # Three requests in one write: the first two make the preferred size and go; the third
    # starts the next batch, which waits for the delay... unless it is full or preferred: a
    # fourth, sent afterwards, makes it preferred.
    front.send(
        *(worker.execute(B0 + i, worker.request(B0 + i, float(i), shape=[1, 1])) for i in (1, 2, 3))
    )
    got = [front.read().result for _ in range(2)]
    assert sorted(r.batch_id for r in got) == [B0 + 1, B0 + 2]
    assert all(outputs(worker, r.responses[0])["N"] == [2] for r in got)
    assert front.silent()  # the third waits for company
    front.send(worker.execute(B0 + 4, worker.request(B0 + 4, 4.0, shape=[1, 1])))
    got = [front.read().result for _ in range(2)]
    assert sorted(r.batch_id for r in got) == [B0 + 3, B0 + 4]
    assert all(outputs(worker, r.responses[0])["N"] == [2] for r in got)


def test_requests_of_other_shapes_or_past_the_size_run_apart(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(3)
    front = worker.connect(0)
    front.send(
        worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, count=2, shape=[1, 2])),
        worker.execute(B0 + 2, worker.request(B0 + 2, 2.0, count=3, shape=[1, 3])),
        worker.execute(B0 + 3, worker.request(B0 + 3, 3.0, count=6, shape=[2, 3])),
        worker.execute(B0 + 4, worker.request(B0 + 4, 4.0, count=6, shape=[2, 3])),
    )
    results = {r.batch_id: r for r in (front.read().result for _ in range(4))}
    sizes = {i: outputs(worker, results[B0 + i].responses[0])["N"] for i in range(1, 5)}
    # [1,2] and [1,3] differ past the batch dimension; [1,3] + [2,3] make 3 rows (full);
    # the last [2,3] does not fit beside them and runs alone.
    assert sizes == {1: [1], 2: [2], 3: [2], 4: [1]}
    assert not results[B0 + 1].merged and not results[B0 + 4].merged
    assert results[B0 + 2].merged and results[B0 + 3].merged


def test_a_batchs_outputs_stay_until_every_part_is_released(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(2, LONG_US)
    first, second = worker.connect(0), worker.connect(1)
    first.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, count=256, shape=[1, 256])))
    second.send(worker.execute(B1 + 1, worker.request(B1 + 1, 2.0, count=256, shape=[1, 256])))
    kept = second.read().result.responses[0]
    first.read()
    before = outputs(worker, kept)["OUT"]
    # The first front end releases its part; the second still reads its output: the next
    # batches (which fill the small arena) must not be written over it.
    first.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B0 + 1])))
    for i in (2, 3):
        first.send(worker.execute(B0 + i, worker.request(B0 + i, 9.0, count=256, shape=[1, 256])))
        second.send(worker.execute(B1 + i, worker.request(B1 + i, 9.0, count=256, shape=[1, 256])))
        first.read(), second.read()
        first.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B0 + i])))
        second.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B1 + i])))
    assert outputs(worker, kept)["OUT"] == before == [4.0] * 256


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({}, ""),
        ({"max_batch_size": 4, "dynamic_batching": {}}, None),
        ({"max_batch_size": 0, "dynamic_batching": {}}, "without max_batch_size"),
        ({"max_batch_size": 4, "dynamic_batching": {"priority_levels": 2}}, "priority levels"),
        ({"max_batch_size": 4, "dynamic_batching": {"preserve_ordering": True}}, "preserve"),
        (
            {
                "max_batch_size": 4,
                "dynamic_batching": {"default_queue_policy": {"max_queue_size": 3}},
            },
            "queue policy",
        ),
        (
            {
                "max_batch_size": 4,
                "dynamic_batching": {"default_queue_policy": {"allow_timeout_override": True}},
            },
            "queue policy",
        ),
    ],
)
def test_which_dynamic_batching_a_worker_honours_alone(
    config: dict[str, object], why: str | None
) -> None:
    policy, refusal = direct_batching(config)
    if why is None:
        assert policy is not None and refusal == ""
    else:
        assert policy is None and why in refusal
