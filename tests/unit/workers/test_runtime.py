"""The worker runtime without a daemon: ``WorkerRuntime.handle()`` driven with real frames.

The test holds the daemon's end of the socket (a listener in this process) and the daemon's
input segment (an arena in a temporary directory standing for /dev/shm); the model is a small
``model.py``. What crosses processes for real is in tests/integration.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader
from pbd_wire.shm import Arena, SegmentMap
from pbd_worker.model_api import state
from pbd_worker.runtime import (
    EXIT_INIT_FAILED,
    RECONNECT_FIRST_S,
    RECONNECT_LONGEST_S,
    WorkerRuntime,
)

WAIT_S = 30.0  # a bound on a read that went wrong, never reached when it passes
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
_addresses = itertools.count()

MODEL = textwrap.dedent(
    """
    import json
    import time

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            config = json.loads(args["model_config"])
            if config["name"] == "broken":
                raise ValueError("no weights")
            self.decoupled = config.get("model_transaction_policy", {}).get("decoupled")
            self.held = []  # decoupled: requests answered later with their response sender
            self.finalized = False

        def execute(self, requests):
            if self.decoupled:
                self.held += requests
                return None
            out = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                if x.size and x[0] == SLOW:
                    time.sleep(SLOW_S)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
            return out

        def finalize(self):
            self.finalized = True
    """
)

SLOW, SLOW_S = 99.0, 0.4  # a request of this value takes the model that long
MODEL = MODEL.replace("SLOW_S", str(SLOW_S)).replace("SLOW", str(SLOW))


class Daemon:
    """The daemon's end: frames to the worker go through ``runtime.handle``, frames from it
    are read here; inputs are written into the daemon's arena."""

    def __init__(self, runtime: WorkerRuntime, conn: socket.socket, shm_dir: Path) -> None:
        self.runtime = runtime
        self.conn = conn
        self.reader = SocketFrameReader(conn)
        self.shm_dir = str(shm_dir)
        self.inputs = Arena("pbdtest-in-", 1 << 16, 1 << 16)
        self.outputs = SegmentMap(self.shm_dir)  # the worker's output segments

    def send(self, **kind: object) -> None:
        self.runtime.handle(wpb.DaemonToWorker(**kind))  # type: ignore[arg-type]

    def read(self) -> wpb.WorkerToDaemon:
        frame = self.reader.read()
        assert frame is not None, "the worker closed the connection"
        return wpb.WorkerToDaemon.FromString(frame)

    def initialize(
        self,
        model_dir: Path,
        config: dict[str, object],
        heartbeat_ms: int = 3_600_000,
        execute_timeout_ms: int = 0,
    ) -> wpb.Initialized:
        self.send(
            initialize=wpb.Initialize(
                args={
                    "model_config": json.dumps(config),
                    "model_name": str(config["name"]),
                    "model_instance_name": f"{config['name']}_0",
                    "model_version": "1",
                },
                model_path=str(model_dir / "1" / "model.py"),
                model_dir=str(model_dir),
                version="1",
                output_region_prefix="pbdtest-out-",
                output_region_bytes=1 << 16,
                heartbeat_interval_ms=heartbeat_ms,  # by default none during a test
                shm_dir=self.shm_dir,
                execute_timeout_ms=execute_timeout_ms,
            )
        )
        reply = self.read()
        assert reply.WhichOneof("kind") == "initialized"
        return reply.initialized

    def execute(self, batch_id: int, *values: list[float]) -> None:
        """One request per list of values (FP32 input ``IN``), ids 1, 2, ..."""
        requests = []
        for request_id, floats in enumerate(values, start=1):
            data = np.asarray(floats, np.float32).tobytes()
            block = self.inputs.allocate(len(data))
            block.view()[:] = data
            ref = wpb.TensorRef(
                name="IN", datatype="FP32", shape=[len(floats)], region=block.segment.name,
                offset=block.offset, nbytes=len(data),
            )  # fmt: skip
            requests.append(wpb.Request(request_id=request_id, id=f"r{request_id}", inputs=[ref]))
        self.send(execute=wpb.Execute(batch_id=batch_id, requests=requests))

    def output(self, ref: wpb.TensorRef) -> list[float]:
        view = self.outputs.view(ref.region, ref.offset, ref.nbytes)
        return np.frombuffer(view, np.float32).tolist()

    def close(self) -> None:
        self.outputs.close()
        self.inputs.close()
        self.conn.close()


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text(MODEL)
    return tmp_path / "m"


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    address = f"@pbd-test-runtime-{os.getpid()}-{next(_addresses)}"
    # The runtime sets the model API's process-wide hooks; other tests expect them unset.
    saved = {name: getattr(state, name) for name in _STATE}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(b"\0" + address[1:].encode())
        server.listen(1)
        runtime = WorkerRuntime(address, "m_0")
        runtime.link.connect()
        conn, _ = server.accept()
    conn.settimeout(WAIT_S)
    end = Daemon(runtime, conn, shm_dir)
    try:
        yield end
    finally:
        if not runtime.finalizing:
            runtime.finalize_alone("the test ended")
        runtime.link.disconnect()
        runtime.loop.close()  # a worker process keeps its loop until it exits
        end.close()
        for name, value in saved.items():
            setattr(state, name, value)
        gc.unfreeze()  # initialize() froze what the model loaded


_STATE = (
    "bls_executor",
    "bls_async_executor",
    "model_control",
    "metrics_channel",
    "response_sender_factory",
)


def test_initialize_execute_release_finalize(daemon: Daemon, model_dir: Path) -> None:
    assert not daemon.initialize(model_dir, {"name": "m"}).HasField("error")
    daemon.execute(1, [1.0, 2.0], [3.0])
    reply = daemon.read()
    assert reply.WhichOneof("kind") == "result"
    result = reply.result
    assert result.batch_id == 1 and [r.request_id for r in result.responses] == [1, 2]
    assert not any(r.HasField("error") for r in result.responses)
    outputs = [r.outputs[0] for r in result.responses]
    assert [o.name for o in outputs] == ["OUT", "OUT"]
    assert [list(o.shape) for o in outputs] == [[2], [1]]
    assert [daemon.output(o) for o in outputs] == [[2.0, 4.0], [6.0]]
    executor = daemon.runtime.executor
    assert executor is not None and executor.held_batches() == [1]
    assert (daemon.runtime.executed, daemon.runtime.requests) == (1, 2)

    daemon.send(release=wpb.Release(batch_ids=[1]))
    assert executor.held_batches() == [] and executor.outputs.used == 0

    model = daemon.runtime.model
    daemon.send(finalize=wpb.Finalize())
    reply = daemon.read()
    assert reply.WhichOneof("kind") == "finalized" and not reply.finalized.HasField("error")
    assert model.finalized and daemon.runtime.model is None
    assert daemon.runtime.exit_code == 0


def test_an_initialize_that_raises_is_reported_and_the_worker_is_to_exit(
    daemon: Daemon, model_dir: Path
) -> None:
    reply = daemon.initialize(model_dir, {"name": "broken"})
    assert reply.error.code == "INTERNAL"
    assert reply.error.message.startswith("initialize() failed: ValueError: no weights\n")
    assert "model.py" in reply.error.traceback
    assert daemon.runtime.exit_code == EXIT_INIT_FAILED


def test_heartbeats_go_only_while_a_daemon_has_taken_the_worker(
    daemon: Daemon, model_dir: Path
) -> None:
    """A re-attaching worker is silent until the new daemon answered its Hello with Initialize
    and got Initialized: a heartbeat ahead of either was refused (issue #31)."""
    runtime = daemon.runtime
    assert not daemon.initialize(model_dir, {"name": "m"}, heartbeat_ms=10).HasField("error")
    assert runtime.attached.is_set()
    assert daemon.read().WhichOneof("kind") == "heartbeat"
    runtime.attached.clear()  # what a lost connection leaves until the next Initialized
    daemon.conn.settimeout(0.3)  # 30 heartbeat intervals
    late: list[str] = []
    with pytest.raises(TimeoutError):
        for _ in range(3):
            late.append(str(daemon.read().WhichOneof("kind")))
    assert late in ([], ["heartbeat"])  # at most one was already on its way
    daemon.conn.settimeout(WAIT_S)
    reply = daemon.initialize(model_dir, {"name": "m"}, heartbeat_ms=10)  # the same model
    assert reply.adopted and runtime.attached.is_set()
    assert daemon.read().WhichOneof("kind") == "heartbeat"


def test_an_execute_past_its_time_limit_is_told_once_as_the_limit_passes(
    daemon: Daemon, model_dir: Path
) -> None:
    """``Initialize.execute_timeout_ms``: the heartbeat thread sends a Heartbeat of its own
    (``overdue_ms``) while an execute() runs past the limit, once per execute(), and none for
    one within it (no regular heartbeat comes during the test)."""
    limit_ms = 100
    assert not daemon.initialize(model_dir, {"name": "m"}, execute_timeout_ms=limit_ms).HasField(
        "error"
    )
    for batch_id in (1, 2):  # each slow execute() is told
        daemon.execute(batch_id, [SLOW])  # runs here, SLOW_S long
        told = daemon.read()
        assert told.WhichOneof("kind") == "heartbeat"
        assert limit_ms <= told.heartbeat.overdue_ms < SLOW_S * 1000
        result = daemon.read()
        assert result.WhichOneof("kind") == "result" and result.result.batch_id == batch_id
    daemon.execute(3, [1.0])
    assert daemon.read().WhichOneof("kind") == "result"  # within the limit: nothing else
    daemon.conn.settimeout(0.3)
    with pytest.raises(TimeoutError):
        daemon.read()


def test_an_adopted_worker_says_whether_a_daemon_saw_its_warmup_end(
    daemon: Daemon, model_dir: Path
) -> None:
    """A daemon that died during model_warmup never sent WarmedUp: the next one is told so,
    and warms the model up before it counts as ready."""
    assert not daemon.initialize(model_dir, {"name": "m"}).HasField("error")
    adopted = daemon.initialize(model_dir, {"name": "m"})  # a new daemon, mid-warmup before
    assert adopted.adopted and not adopted.warmed_up
    daemon.send(warmed_up=wpb.WarmedUp())
    adopted = daemon.initialize(model_dir, {"name": "m"})
    assert adopted.adopted and adopted.warmed_up


def test_reconnect_waits_double_with_jitter_and_start_over_once_taken(
    daemon: Daemon, model_dir: Path
) -> None:
    runtime = daemon.runtime
    bases = [RECONNECT_FIRST_S * 2**i for i in range(8)]
    for base in bases:
        expected = min(base, RECONNECT_LONGEST_S)
        assert 0.5 * expected <= runtime._next_wait() <= 1.5 * expected
    assert not daemon.initialize(model_dir, {"name": "m"}).HasField("error")
    assert runtime._next_wait() <= 1.5 * RECONNECT_FIRST_S


def test_a_cancel_frame_reaches_a_request_still_answered_by_its_sender(
    daemon: Daemon, model_dir: Path
) -> None:
    config = {"name": "m", "model_transaction_policy": {"decoupled": True}}
    assert not daemon.initialize(model_dir, config).HasField("error")
    daemon.execute(1, [1.0], [2.0])
    result = daemon.read().result
    assert [(r.request_id, r.streamed) for r in result.responses] == [(1, True), (2, True)]
    first, second = daemon.runtime.model.held

    daemon.send(cancel=wpb.CancelRequests(request_ids=[2, 99]))  # 99: unknown, ignored
    assert (first.is_cancelled(), second.is_cancelled()) == (False, True)

    first.get_response_sender().send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    streamed = daemon.read().streamed
    assert (streamed.request_id, streamed.flags) == (1, TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert not streamed.HasField("response")
    daemon.send(cancel=wpb.CancelRequests(request_ids=[1]))  # finished: nothing to cancel
    assert not first.is_cancelled()


TWO_ANSWERS = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            x = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
            sender = requests[0].get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))  # raises
    """
)


def test_a_default_mode_request_answered_twice_sends_both_answers(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sender's response (kept: no final flag), then execute() raising: the response goes,
    then Triton's "got 2" as the last; the daemon's edges pick (ModelInfer the error, a
    stream the response)."""
    (tmp_path / "two" / "1").mkdir(parents=True)
    (tmp_path / "two" / "1" / "model.py").write_text(TWO_ANSWERS)
    # A worker imports its one model as module "1.model": another test's is cached here.
    for name in ("1", "1.model"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert not daemon.initialize(tmp_path / "two", {"name": "two"}).HasField("error")
    daemon.execute(1, [5.0])
    first, last, result = (daemon.read() for _ in range(3))
    assert (first.streamed.request_id, first.streamed.flags) == (1, 0)
    assert daemon.output(first.streamed.response.outputs[0]) == [5.0]
    assert last.streamed.flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
    assert last.streamed.response.error.message == "expected a single response, got 2"
    assert [(r.request_id, r.streamed) for r in result.result.responses] == [(1, True)]


def test_an_input_outside_its_mapped_segment_fails_its_batch_with_the_segments_error(
    daemon: Daemon, model_dir: Path
) -> None:
    assert not daemon.initialize(model_dir, {"name": "m"}).HasField("error")
    daemon.execute(1, [1.0])  # maps the daemon's input segment
    assert not daemon.read().result.responses[0].HasField("error")
    segment = daemon.inputs.segments[0]
    ref = wpb.TensorRef(
        name="IN", datatype="FP32", shape=[1], region=segment.name, offset=segment.size - 2,
        nbytes=4,
    )  # fmt: skip
    request = wpb.Request(request_id=2, inputs=[ref])
    daemon.send(execute=wpb.Execute(batch_id=2, requests=[request]))
    error = daemon.read().result.responses[0].error
    assert error.code == "INTERNAL"
    assert error.message == (
        f"bad request descriptor: range [{segment.size - 2}, {segment.size + 2}) outside "
        f"segment {segment.name!r} of {segment.size} bytes"
    )


def test_a_malformed_bytes_input_in_a_clients_region_is_refused_alone(
    daemon: Daemon, model_dir: Path
) -> None:
    """The daemon does not map a client's region, so the worker checks a BYTES input there:
    the malformed request gets Triton's INVALID_ARG, the rest of its batch runs."""
    assert not daemon.initialize(model_dir, {"name": "m"}).HasField("error")
    region = Path(daemon.shm_dir) / "client_strings"
    good, bad = b"\x02\x00\x00\x00ok", b"\x05\x00\x00\x00ab"
    region.write_bytes(good + bad)
    st = region.stat()
    name = f"client_strings#1:{st.st_dev}:{st.st_ino}"
    requests = [
        wpb.Request(
            request_id=request_id,
            inputs=[
                wpb.TensorRef(
                    name="IN", datatype="BYTES", shape=[1], region=name, offset=offset, nbytes=size
                )
            ],
        )  # fmt: skip
        for request_id, offset, size in ((1, len(good), len(bad)), (2, 0, len(good)))
    ]
    daemon.send(execute=wpb.Execute(batch_id=1, requests=requests))
    responses = {r.request_id: r for r in daemon.read().result.responses}
    assert (responses[1].error.code, responses[1].error.message) == (
        "INVALID_ARG",
        "incomplete string data for inference input 'IN', expecting string of length 5 but only "
        "2 bytes available",
    )
    assert not responses[2].HasField("error") and responses[2].outputs[0].name == "OUT"
    assert daemon.runtime.executor is not None
    assert daemon.runtime.executor.live.live_ids() == []
