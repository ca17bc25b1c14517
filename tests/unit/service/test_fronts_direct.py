"""``pbd.fronts.direct``: a front end's direct path against a worker played by the test, on a
real socket (the worker's side of ``worker.proto``'s direct path, frame by frame)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pbd._proto import front_pb2 as fpb
from pbd.errors import Code, PbdError
from pbd.fronts import direct_link
from pbd.fronts.direct import Direct
from pbd.fronts.direct_link import DirectStream
from pbd.h2.sending import Sender
from pbd.responses import StreamResult
from pbd.stats import ModelStats
from pbd.types import InferRequest, InferResult, InputTensor, RequestedOutput, ShmSlice
from pbd_wire import front_base, front_of
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import FrameSplitter, encode_frame
from pbd_wire.shm import Arena, Block

CONFIG = json.dumps(
    {
        "name": "add_sub",
        "backend": "python",
        "max_batch_size": 0,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": ["4"]},
        ],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    }
)


class FakeWorker:
    """A worker's front socket: accepts one link, records its frames, answers on demand."""

    def __init__(self, name: str) -> None:
        self.address = f"@{name}"
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(b"\0" + name.encode())
        self.server.listen(4)
        self.server.setblocking(False)
        self.conn: socket.socket | None = None
        self.frames: list[wpb.DaemonToWorker] = []
        self._split = FrameSplitter()

    async def accept(self) -> None:
        loop = asyncio.get_running_loop()
        self.conn, _ = await loop.sock_accept(self.server)

    async def read(self, count: int) -> list[wpb.DaemonToWorker]:
        """Until ``count`` frames (in all) came."""
        loop = asyncio.get_running_loop()
        assert self.conn is not None
        while len(self.frames) < count:
            data = await asyncio.wait_for(loop.sock_recv(self.conn, 65536), 5)
            if not data:
                break
            for frame in self._split.split(data):
                self.frames.append(wpb.DaemonToWorker.FromString(bytes(frame)))
        return self.frames

    async def send(self, message: wpb.WorkerToDaemon) -> None:
        assert self.conn is not None
        await asyncio.get_running_loop().sock_sendall(
            self.conn, encode_frame(message.SerializeToString())
        )

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.server.close()


class Plane:
    """What ``RemotePlane`` lends the direct path: an arena, views, frees."""

    def __init__(self, tag: str) -> None:
        self.arena = Arena(f"pbdtestdirect{os.getpid()}{tag}-d", 1 << 16, 1 << 16)
        self.freed: list[Block] = []

    def view(self, region: str, offset: int, nbytes: int) -> memoryview:
        own = self.arena.find(region)
        if own is None:
            raise ValueError(f"no segment {region}")
        return own.view(offset, nbytes)

    def own(self, region: str) -> bool:
        return self.arena.find(region) is not None

    def free(self, blocks: list[Block]) -> None:
        self.freed.extend(blocks)
        for block in blocks:
            self.arena.free(block)
        blocks.clear()

    def place(self, request: InferRequest) -> list[Block]:
        blocks = []
        for tensor in request.inputs:
            if tensor.data is None:  # in a client's region: named there, not placed
                continue
            block = self.arena.allocate(len(tensor.data))
            block.view()[:] = tensor.data
            blocks.append(block)
            tensor.data = block.view()
            tensor.placed = ShmSlice(block.segment.name, block.offset, block.nbytes)
        return blocks


def table(worker: FakeWorker, *, latest: bool = True) -> list[fpb.DirectVersion]:
    instance = fpb.DirectInstance(name="instance 'add_sub_0'", socket=worker.address, token="t")
    return [
        fpb.DirectVersion(
            model="add_sub", version="1", latest=latest, config_json=CONFIG, instances=[instance]
        )
    ]


def request(**changes: Any) -> InferRequest:
    data = memoryview(bytes(16))
    inputs = [
        InputTensor("INPUT0", "FP32", (4,), data),
        InputTensor("INPUT1", "FP32", (4,), data),
    ]
    fields: dict[str, Any] = {
        "model_name": "add_sub",
        "model_version": "",
        "id": "r",
        "inputs": inputs,
    }
    fields.update(changes)
    return InferRequest(**fields)


def run(
    test: Callable[[Direct, FakeWorker, Plane], Awaitable[None]], tag: str, budget: int = 0
) -> None:
    async def main() -> None:
        plane = Plane(tag)
        worker = FakeWorker(f"pbdtestdirect-{os.getpid()}-{tag}")
        direct = Direct(3, "/dev/shm", plane.view, plane.own, plane.free, budget)
        try:
            direct.update(table(worker))
            await worker.accept()
            hello = (await worker.read(1))[0]
            assert hello.front_hello.token == "t" and hello.front_hello.front == 3
            for _ in range(100):  # until the link's connection is made
                if direct.versions[("add_sub", "")].pick() is not None:
                    break
                await asyncio.sleep(0.01)
            await test(direct, worker, plane)
        finally:
            direct.close()
            worker.close()
            plane.arena.close()

    asyncio.run(main())


def result_for(execute: wpb.Execute, region: str, offset: int) -> wpb.WorkerToDaemon:
    """The worker's answer: OUTPUT0 is INPUT0 returned in place (the front end's arena)."""
    (req,) = execute.requests
    message = wpb.WorkerToDaemon()
    result = message.result
    result.batch_id, result.input_ns, result.infer_ns, result.output_ns = execute.batch_id, 1, 2, 3
    response = result.responses.add(request_id=req.request_id)
    response.outputs.add(name="OUTPUT0", datatype="FP32", shape=[4], region=region,
                         offset=offset, nbytes=16)  # fmt: skip
    return message


def sent(direct: Direct, plane: Plane) -> asyncio.Future[InferResult | None]:
    """A plain request routed to the direct path and sent: its answer, to come."""
    version = direct.route(request())
    assert version is not None
    return asyncio.ensure_future(direct.infer(request(), version, plane.place))


def test_a_request_runs_on_the_worker_and_is_counted() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        answer = sent(direct, plane)
        frames = await worker.read(2)
        execute = frames[1].execute
        (req,) = execute.requests
        assert execute.batch_id == req.request_id
        assert front_of(req.request_id) == 3 and req.request_id > front_base(3)
        assert [i.name for i in req.inputs] == ["INPUT0", "INPUT1"]
        assert all(plane.own(i.region) and i.nbytes == 16 for i in req.inputs)
        loads = direct.report(6).loads  # for the daemon's pending-request gauge
        assert [(load.socket, load.inflight) for load in loads] == [(worker.address, 1)]
        first = req.inputs[0]
        await worker.send(result_for(execute, first.region, first.offset))
        result = await asyncio.wait_for(answer, 5)
        assert result is not None
        assert (result.model_name, result.model_version, result.id) == ("add_sub", "1", "r")
        assert [o.name for o in result.outputs] == ["OUTPUT0"]
        assert plane.freed == []  # the output is an input returned in place: still read
        result.release()
        assert len(plane.freed) == 2
        report = direct.report(7)
        assert report.ask == 7 and list(report.loads) == []  # nothing in flight now
        (counted,) = report.versions
        stats = ModelStats()
        stats.merge_record(json.loads(counted.record))
        assert (counted.model, counted.version) == ("add_sub", "1")
        assert (stats.success.count, stats.execution_count, stats.inference_count) == (1, 1, 1)
        assert (stats.compute_input.ns, stats.compute_infer.ns, stats.compute_output.ns) == (
            1, 2, 3,
        )  # fmt: skip
        assert direct.report(8).versions == []  # reported once

    run(body, "a")


def test_a_failed_request_is_the_models_error_and_a_failure() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        answer = sent(direct, plane)
        execute = (await worker.read(2))[1].execute
        message = wpb.WorkerToDaemon()
        message.result.batch_id = execute.batch_id
        message.result.responses.add(
            request_id=execute.requests[0].request_id,
            error=wpb.Error(code="INVALID_ARG", message="the model says no"),
        )
        await worker.send(message)
        with pytest.raises(PbdError, match="the model says no") as caught:
            await asyncio.wait_for(answer, 5)
        assert caught.value.code is Code.INVALID_ARG
        assert len(plane.freed) == 2  # no result to read: the inputs are free at once
        # The worker may hold blocks for a failed response: it is told to release them.
        await asyncio.sleep(0.05)
        frames = await worker.read(3)
        assert list(frames[2].release.batch_ids) == [execute.batch_id]
        stats = ModelStats()
        stats.merge_record(json.loads(direct.report(1).versions[0].record))
        assert (stats.fail.count, stats.failures["BACKEND"], stats.execution_count) == (1, 1, 0)

    run(body, "b")


def test_an_invalid_request_is_refused_before_it_leaves() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        wrong = request(inputs=[InputTensor("NOPE", "FP32", (4,), memoryview(bytes(16)))])
        version = direct.route(wrong)
        assert version is not None
        with pytest.raises(PbdError, match="unexpected inference input 'NOPE'") as caught:
            await direct.infer(wrong, version, plane.place)
        assert caught.value.before_model
        assert len(plane.freed) == 1
        assert direct.report(1).versions == []  # nothing counted

    run(body, "c")


def test_the_worker_going_away_fails_what_it_had_in_the_daemons_words() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        answer = sent(direct, plane)
        await worker.read(2)
        assert worker.conn is not None
        worker.conn.close()
        await asyncio.sleep(0.05)
        assert not answer.done()  # waiting for the daemon to say how the worker ended
        direct.instance_gone(worker.address, "worker for m_0 was killed by signal 9")
        with pytest.raises(PbdError, match="^worker for m_0 was killed by signal 9$") as caught:
            await asyncio.wait_for(answer, 5)
        assert caught.value.code is Code.UNAVAILABLE
        version = direct.route(request())
        assert version is not None and version.pick() is None  # the daemon takes the next ones
        assert len(plane.freed) == 2

    run(body, "d")


def test_without_the_daemons_words_the_link_says_it_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(direct_link, "GONE_WAIT_S", 0.05)

    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        answer = sent(direct, plane)
        await worker.read(2)
        assert worker.conn is not None
        worker.conn.close()
        with pytest.raises(PbdError, match="closed its connection"):
            await asyncio.wait_for(answer, 5)

    run(body, "g")


def regions(*names: str, removed: tuple[str, ...] = (), everything: bool = True) -> fpb.Regions:
    """The daemon's change: system regions of 64 bytes registered, each its own registration
    (by default the whole list, as a front end gets it when it links), or ``removed``."""
    change = fpb.Regions(all=everything, removed=removed)
    for generation, name in enumerate(names, start=1):
        change.added.add(name=name, worker_name=f"client_{name}#{generation}:1:2", byte_size=64)
    return change


def in_region(name: str) -> InferRequest:
    where = {"shared_memory_region": name, "shared_memory_byte_size": 16}
    data = memoryview(bytes(16))
    inputs = [InputTensor("INPUT0", "FP32", (4,), None, where),
              InputTensor("INPUT1", "FP32", (4,), data)]  # fmt: skip
    return request(inputs=inputs)


def test_requests_naming_unknown_regions_or_versions_go_through_the_daemon() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        assert direct.route(request(model_version="1")) is not None
        assert direct.route(request(model_version="2")) is None
        assert direct.route(request(model_name="other")) is None
        assert direct.route(in_region("r")) is None  # no table yet
        out_shm = request(outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "r"})])
        assert direct.route(out_shm) is None
        direct.follow_regions(regions("r"))
        assert direct.route(in_region("r")) is not None
        assert direct.route(out_shm) is not None
        direct.follow_regions(regions("q", everything=False))  # one more registered
        assert direct.route(in_region("q")) is not None
        assert direct.route(in_region("r")) is not None
        direct.follow_regions(regions(removed=("q",), everything=False))
        assert direct.route(in_region("q")) is None
        assert direct.route(in_region("r")) is not None
        assert direct.route(in_region("cuda0")) is None  # a CUDA region's, or unknown
        odd = request(outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": 7})])
        assert direct.route(odd) is None  # the daemon says what is wrong with it

    run(body, "e")


def test_a_region_left_out_of_the_table_is_let_go_once_its_requests_end() -> None:
    """The worker is told where the input lies in the client's region; the region stays held
    until the request ends, past a table that no longer lists it."""

    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        direct.follow_regions(regions("r"))
        version = direct.route(in_region("r"))
        assert version is not None
        answer = asyncio.ensure_future(direct.infer(in_region("r"), version, plane.place))
        execute = (await worker.read(2))[1].execute
        ref = execute.requests[0].inputs[0]
        assert (ref.region, ref.offset, ref.nbytes) == ("client_r#1:1:2", 0, 16)
        direct.follow_regions(regions("s", everything=False))  # another: "r" not let go
        await asyncio.wait_for(direct.regions_let_go(), 5)
        direct.follow_regions(regions(removed=("r",), everything=False))
        assert direct.route(in_region("r")) is None
        let_go = asyncio.ensure_future(direct.regions_let_go())
        await asyncio.sleep(0.05)
        assert not let_go.done()  # the request still holds it
        other = execute.requests[0].inputs[1]
        await worker.send(result_for(execute, other.region, other.offset))
        result = await asyncio.wait_for(answer, 5)
        assert result is not None
        result.release()
        await asyncio.wait_for(let_go, 5)

    run(body, "g")


def test_an_instance_taken_out_of_the_table_finishes_what_it_has() -> None:
    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        answer = sent(direct, plane)
        execute = (await worker.read(2))[1].execute
        retired = direct.update([])
        assert direct.route(request()) is None
        assert len(retired) == 1 and retired[0].calls
        drained = asyncio.ensure_future(direct.drained(retired, 5))
        await asyncio.sleep(0.05)
        assert not drained.done()  # one request still in the worker
        first = execute.requests[0].inputs[0]
        await worker.send(result_for(execute, first.region, first.offset))
        result = await asyncio.wait_for(answer, 5)
        await asyncio.wait_for(drained, 5)
        assert result is not None
        result.release()
        assert (
            retired[0].closed or retired[0].transport is None or (retired[0].transport.is_closing())
        )

    run(body, "f")


def test_past_its_share_of_the_byte_budget_a_request_goes_through_the_daemon() -> None:
    """Two inputs of 16 bytes: 32 bytes, one request fits a budget of 48, a second does not
    while the first is held (the daemon's --max-queued-bytes then decides on it)."""

    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        version = direct.route(request())
        assert version is not None
        first = asyncio.ensure_future(direct.infer(request(), version, plane.place))
        execute = (await worker.read(2))[1].execute
        assert direct.held == 32
        assert await direct.infer(request(), version, plane.place) is None
        assert plane.freed == []  # nothing was placed for it
        first_input = execute.requests[0].inputs[0]
        await worker.send(result_for(execute, first_input.region, first_input.offset))
        result = await asyncio.wait_for(first, 5)
        assert result is not None and direct.held == 0
        result.release()

    run(body, "h", budget=48)


def test_a_decoupled_stream_gets_its_first_response_before_the_rest_of_a_burst_is_read() -> None:
    """A burst of a decoupled model's responses read at once: the first goes to the stream's
    reader before the others are handled (the rest wait for the next loop turn)."""

    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        started = await _three_responses_at_once(direct, worker, plane, request())
        items = started.__aiter__()
        async with asyncio.timeout(5):  # in this task: the reader the first response wakes
            first = await items.__anext__()
        assert first.result is not None and not first.final
        assert len(started.stream._items) == 0  # the other two are not handled yet
        rest = [await asyncio.wait_for(items.__anext__(), 5) for _ in range(2)]
        assert [item.final for item in rest] == [False, True]
        for item in (first, *rest):
            if item.result is not None:
                item.result.release()
        await items.aclose()
        (counted,) = direct.report(9).versions
        stats = ModelStats()
        stats.merge_record(json.loads(counted.record))
        assert (stats.success.count, stats.execution_count) == (1, 1)

    run(body, "burst")


def test_with_a_listener_the_first_response_is_written_before_the_burst_is_read() -> None:
    """A gRPC stream takes each response where it is read (``InferRequest.on_response``) and
    writes it: the first response's write has left before the rest of the burst is handled,
    and the rest, handled together, leave in one write (``corked``)."""
    sender = Sender()
    writes: list[bytes] = []
    sender.sink = lambda data: writes.append(bytes(data))
    sender.sink_parts = lambda parts: writes.append(b"".join(parts))
    writes_before: list[int] = []

    def listener(item: StreamResult) -> None:
        writes_before.append(len(writes))
        sender.write(b"r")  # as the gRPC stream writes a response
        if item.result is not None:
            item.result.release()

    async def body(direct: Direct, worker: FakeWorker, plane: Plane) -> None:
        asked = request()
        asked.on_response = listener
        started = await _three_responses_at_once(direct, worker, plane, asked)
        async with asyncio.timeout(5):
            yielded = [item async for item in started]
        assert yielded == []  # each went to the listener
        (counted,) = direct.report(9).versions
        stats = ModelStats()
        stats.merge_record(json.loads(counted.record))
        assert (stats.success.count, stats.execution_count) == (1, 1)

    run(body, "listener")
    assert writes_before == [0, 1, 1]
    assert writes == [b"r", b"rr"]


async def _three_responses_at_once(
    direct: Direct, worker: FakeWorker, plane: Plane, asked: InferRequest
) -> DirectStream:
    """``asked`` streamed on a decoupled version; the worker answers with its result and
    three responses (the last final) in one write."""
    config = json.loads(CONFIG)
    config["model_transaction_policy"] = {"decoupled": True}
    (version_spec,) = table(worker)
    version_spec.config_json = json.dumps(config)
    direct.update([version_spec])
    version = direct.route(asked)
    assert version is not None and version.config.decoupled
    started = direct.stream(asked, version, plane.place)
    assert started is not None
    execute = (await worker.read(2))[1].execute
    (req,) = execute.requests
    result = wpb.WorkerToDaemon()
    result.result.batch_id = execute.batch_id
    result.result.responses.add(request_id=req.request_id, streamed=True)
    burst = [result] + [
        wpb.WorkerToDaemon(
            streamed=wpb.StreamedResponse(
                request_id=req.request_id,
                response=wpb.Response(request_id=req.request_id),
                flags=1 if last else 0,
            )
        )
        for last in (False, False, True)
    ]
    assert worker.conn is not None
    worker.conn.sendall(b"".join(encode_frame(m.SerializeToString()) for m in burst))
    return started
