"""Dynamic batches formed in the worker from its front links' Executes
(``pbd_worker.front_batcher``, ``BatchExecutor.run_parts``).

A real worker process, played to as in ``test_front_connections``: front ends are sockets of this
test, each sending one request per Execute as a front end does. The model answers each request
with OUT = IN * 2 and N, the number of requests its ``execute()`` got.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_front_connections import B0, B1, WAIT_S, Start, Worker, start  # noqa: F401 - a fixture

from pbd_wire import worker_pb2 as wpb

COUNTING = textwrap.dedent(
    """
    import json
    import os
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            n = np.array([len(requests)], dtype=np.int32)
            out = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                if float(np.ravel(x)[0]) == BUSY:
                    time.sleep(BUSY_S)  # keeps the model busy while others queue
                elif float(np.ravel(x)[0]) == GATED:  # busy until the test opens the gate
                    gate = json.loads(request.parameters())["gate"]
                    open(gate + ".started", "w").close()
                    deadline = time.monotonic() + 30
                    while not os.path.exists(gate) and time.monotonic() < deadline:
                        time.sleep(0.002)
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", x * 2), pb_utils.Tensor("N", n)]
                ))
            return out
    """
)
LONG_US = 30_000_000  # a delay no passing test waits out
BUSY, BUSY_S = 99.0, 0.5  # a request of this value keeps the model busy that long
# A request of this value keeps the model busy until a file (its parameter "gate") exists,
# having made "<gate>.started" (``gated``).
GATED = 98.0
COUNTING = COUNTING.replace("BUSY_S", str(BUSY_S)).replace("BUSY", str(BUSY))
COUNTING = COUNTING.replace("GATED", str(GATED))


@pytest.fixture
def batched(start: Start):  # type: ignore[no-untyped-def]  # noqa: F811
    def make(
        max_batch_size: int,
        delay_us: int = 0,
        preferred: list[int] | None = None,
        **queueing: object,
    ) -> Worker:
        dynamic: dict[str, object] = {"max_queue_delay_microseconds": delay_us, **queueing}
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


def requested(worker: Worker, ident: int, value: float, **fields: int) -> wpb.DaemonToWorker:
    request = worker.request(ident, value, shape=[1, 1])
    for name, number in fields.items():
        setattr(request, name, number)
    return worker.execute(ident, request)


def test_a_higher_priority_request_that_came_later_runs_first(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(1, priority_levels=2, default_priority_level=2)
    front = worker.connect(0)
    front.send(
        requested(worker, B0 + 1, BUSY, priority=1),  # first of the first level
        requested(worker, B0 + 2, 2.0),  # the default level, 2
        requested(worker, B0 + 3, 3.0, priority=1),
    )
    order = [front.read().result.batch_id for _ in range(3)]
    assert order == [B0 + 1, B0 + 3, B0 + 2]


QUEUE_POLICY = {
    "default_timeout_microseconds": 10_000_000,  # not reached by a passing test
    "allow_timeout_override": True,  # a request's own timeout may shorten it
}


def test_a_request_past_its_queue_timeout_is_refused_as_triton_refuses_it(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    worker = batched(1, default_queue_policy=QUEUE_POLICY)
    front = worker.connect(0)
    front.send(
        requested(worker, B0 + 1, BUSY),
        requested(worker, B0 + 2, 2.0, timeout_us=100_000),  # waits BUSY_S behind the first
        requested(worker, B0 + 3, 3.0),
    )
    results = {r.batch_id: r for r in (front.read().result for _ in range(3))}
    (refused,) = results[B0 + 2].responses
    assert refused.rejected and not refused.outputs
    assert (refused.error.code, refused.error.message) == ("UNAVAILABLE", "Request timeout expired")
    assert outputs(worker, results[B0 + 3].responses[0])["OUT"] == [6.0]


def test_with_timeout_action_delay_a_late_request_runs_after_the_others_of_its_level(
    batched,  # type: ignore[no-untyped-def]
) -> None:
    delay = {**QUEUE_POLICY, "timeout_action": "DELAY"}
    worker = batched(1, default_queue_policy=delay)
    front = worker.connect(0)
    front.send(
        requested(worker, B0 + 1, BUSY),
        requested(worker, B0 + 2, 2.0, timeout_us=100_000),
        requested(worker, B0 + 3, 3.0),
    )
    results = [front.read().result for _ in range(3)]
    assert [r.batch_id for r in results] == [B0 + 1, B0 + 3, B0 + 2]
    assert not any(r.responses[0].rejected for r in results)


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def gated(worker: Worker, ident: int, gate: Path) -> wpb.DaemonToWorker:
    """A request that keeps the model busy until ``gate`` exists; it makes
    ``<gate>.started`` as it starts."""
    message = requested(worker, ident, GATED)
    message.execute.requests[0].parameters_json = json.dumps({"gate": str(gate)})
    return message


def test_past_the_queue_bound_the_newest_requests_are_refused_in_tritons_words(
    batched,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """max_queue_size 2 (one instance: all of it is this worker's): of five requests of two
    front ends there when the model is free, the one it takes and two more may wait, the
    others are refused, never run."""
    worker = batched(1, default_queue_policy={"max_queue_size": 2})
    first, second = worker.connect(0), worker.connect(1)
    gate = tmp_path / "gate"
    # Both links serve, and the model is busy while all five come (the worker reads them
    # only once it is free: at once, whatever the machine's load).
    second.send(requested(worker, B1 + 9, 1.0))
    assert not second.read().result.responses[0].rejected
    first.send(gated(worker, B0 + 9, gate))
    wait_until(Path(f"{gate}.started").exists, "the gated request to start")
    first.send(
        requested(worker, B0 + 1, 1.0),
        requested(worker, B0 + 2, 2.0),
        requested(worker, B0 + 3, 3.0),
    )
    second.send(requested(worker, B1 + 1, 4.0), requested(worker, B1 + 2, 5.0))
    gate.touch()
    assert first.read().result.batch_id == B0 + 9
    results = [first.read().result for _ in range(3)] + [second.read().result for _ in range(2)]
    refused = [r for r in results if r.responses[0].rejected]
    ran = [r for r in results if not r.responses[0].rejected]
    assert len(refused) == 2 and len(ran) == 3
    for result in refused:
        (response,) = result.responses
        assert response.error.code == "UNAVAILABLE" and not response.outputs
        assert response.error.message.startswith("Exceeds maximum queue size: model '")
        assert response.error.message.endswith("already has 2 requests waiting (max_queue_size 2)")


def test_the_queue_bound_is_shared_by_the_versions_instances(
    start: Start,  # noqa: F811
) -> None:
    """max_queue_size 2 over two instances: this worker holds one waiting request."""
    config = {
        "max_batch_size": 1,
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": 2}},
        "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    }
    worker = start(model=COUNTING, config=config)
    front = worker.connect(0)
    front.send(
        requested(worker, B0 + 1, BUSY),
        requested(worker, B0 + 2, 2.0),
        requested(worker, B0 + 3, 3.0),
    )
    results = {r.batch_id: r for r in (front.read().result for _ in range(3))}
    assert not results[B0 + 1].responses[0].rejected
    assert not results[B0 + 2].responses[0].rejected
    assert results[B0 + 3].responses[0].rejected  # the newest, past this instance's share
    assert "already has 1 requests waiting (max_queue_size 2)" in (
        results[B0 + 3].responses[0].error.message
    )


DECOUPLED_COUNTING = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            n = np.array([len(requests)], dtype=np.int32)
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUT", x * 2), pb_utils.Tensor("N", n)]
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            return None
    """
)


def test_a_decoupled_models_requests_of_two_front_ends_batch_and_stream_back_on_their_links(
    start: Start,  # noqa: F811
) -> None:
    """A decoupled model with dynamic batching (an LLM that batches): its front ends'
    requests run in one execute() as Triton's batcher would run them, and each request's
    responses go back on the link it came by."""
    config = {
        "max_batch_size": 2,
        "dynamic_batching": {"max_queue_delay_microseconds": LONG_US},  # waits for company
        "model_transaction_policy": {"decoupled": True},
    }
    worker = start(model=DECOUPLED_COUNTING, config=config)
    first, second = worker.connect(0), worker.connect(1)
    first.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, shape=[1, 1])))
    second.send(worker.execute(B1 + 1, worker.request(B1 + 1, 2.0, shape=[1, 1])))
    for link, ident, out in ((first, B0 + 1, [2.0]), (second, B1 + 1, [4.0])):
        got = {str(m.WhichOneof("kind")): m for m in (link.read(), link.read())}
        assert got["result"].result.batch_id == ident
        assert got["result"].result.responses[0].streamed
        streamed = got["streamed"].streamed
        assert streamed.request_id == ident
        assert outputs(worker, streamed.response) == {"OUT": out, "N": [2]}
    assert first.silent() and second.silent() and worker.daemon.silent()
