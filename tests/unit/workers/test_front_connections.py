"""The direct path: front ends that send their requests straight to a worker (worker.proto,
"The direct path"; ``pbd_worker.ipc.front_connections``).

A real worker process (``python -m pbd_worker``) talks to a daemon played here (a listener of
this test's own: Hello, Initialize with a front socket and token, then silence) and to front
ends that are sockets of this test connected to the worker's front socket. Inputs lie in the
daemon's arena in a temporary directory standing for /dev/shm; the worker's outputs are read
from its segments there. What the worker keeps to itself is seen from outside: whether a link
is closed, and where the worker's output arena puts the next block.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from pbd_wire import front_base
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame
from pbd_wire.shm import Arena, SegmentMap, held_segments
from pbd_worker.ipc import front_connections
from pbd_worker.ipc.front_connections import FrontConnections

WAIT_S = 30.0  # a bound on a read that went wrong, never reached when it passes
QUIET_S = 0.3  # how long a socket that is to stay silent is watched
TOKEN = "front-secret"
FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL
_names = itertools.count()

# Default mode: OUT = IN * 2. Decoupled: each request answered by its response sender from a
# thread; "async" in the model's name: by an ``async def execute`` that sleeps first (the
# worker's main loop then reads through its event loop).
MODEL = textwrap.dedent(
    """
    import asyncio
    import json
    import threading

    import triton_python_backend_utils as pb_utils


    def answer(request):
        x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)])


    def send(request):
        request.get_response_sender().send(
            answer(request), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )


    class TritonPythonModel:
        def initialize(self, args):
            config = json.loads(args["model_config"])
            self.decoupled = config.get("model_transaction_policy", {}).get("decoupled")
            self.is_async = "async" in config["name"]

        def execute(self, requests):
            if self.is_async:
                return self.later(requests)
            if not self.decoupled:
                return [answer(r) for r in requests]
            for request in requests:
                threading.Thread(target=send, args=(request,)).start()
            return None

        async def later(self, requests):
            await asyncio.sleep(0.2)
            for request in requests:
                send(request)
    """
)


def frames(*messages: wpb.DaemonToWorker) -> bytes:
    return b"".join(encode_frame(m.SerializeToString()) for m in messages)


class Peer:
    """One end of a connection to the worker: frames out, frames in."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(WAIT_S)
        self.sock = sock
        self.reader = SocketFrameReader(sock)

    def send(self, *messages: wpb.DaemonToWorker) -> None:
        self.sock.sendall(frames(*messages))

    def read(self) -> wpb.WorkerToDaemon:
        frame = self.reader.read()
        assert frame is not None, "the worker closed the connection"
        return wpb.WorkerToDaemon.FromString(frame)

    def silent(self) -> bool:
        """Nothing comes for QUIET_S (and the connection stays open)."""
        self.sock.settimeout(QUIET_S)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(WAIT_S)
        return False

    def closed(self) -> bool:
        """The worker closed this connection (reading what came before the EOF)."""
        try:
            while self.reader.read() is not None:
                pass
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


class Worker:
    """A worker process, initialized with a front socket; this object plays its daemon."""

    def __init__(
        self,
        tmp_path: Path,
        name: str,
        decoupled: bool,
        reconnect: bool,
        model: str = MODEL,
        config: dict[str, object] | None = None,
    ) -> None:
        tag = f"{os.getpid()}-{next(_names)}"
        self.tag = tag
        self.front_address = f"@pbd-test-front-{tag}"
        self.shm_dir = tmp_path / "shm"
        self.shm_dir.mkdir(exist_ok=True)
        model_dir = tmp_path / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(model)
        address = f"@pbd-test-daemon-{tag}"
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        self.log = tmp_path / f"worker-{tag}.log"
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind("\0" + address[1:])
        self.server.listen(1)
        self.server.settimeout(WAIT_S)
        argv = [sys.executable, "-m", "pbd_worker", "--socket", address, "--instance", f"{name}_0"]
        if reconnect:
            argv += ["--reconnect-secs", str(WAIT_S)]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.peers: list[Peer] = []  # front ends, closed at the end
        self.inputs = Arena(f"pbdtest-in-{tag}-", 1 << 16, 1 << 16)
        self.outputs = SegmentMap(str(self.shm_dir))
        config = {"name": name, **(config or {})}
        if decoupled:
            config["model_transaction_policy"] = {"decoupled": True}
        self.init = wpb.Initialize(
            args={
                "model_config": json.dumps(config),
                "model_name": name,
                "model_instance_name": f"{name}_0",
                "model_version": "1",
            },
            model_path=str(model_dir / "1" / "model.py"),
            model_dir=str(model_dir),
            version="1",
            output_region_prefix=f"pbdtest-out-{tag}-",
            output_region_bytes=4096,  # four of the 1 KiB outputs of ``request(..., 256)``
            heartbeat_interval_ms=3_600_000,  # none during a test
            shm_dir=str(self.shm_dir),
            front_socket=self.front_address,
            front_token=TOKEN,
        )
        assert not self.attach().HasField("error")

    def attach(self) -> wpb.Initialized:
        """Take the worker's connection: Hello, Initialize (``self.init``), Initialized."""
        conn, _ = self.server.accept()
        self.daemon = Peer(conn)
        assert self.daemon.read().WhichOneof("kind") == "hello"
        self.daemon.send(wpb.DaemonToWorker(initialize=self.init))
        reply = self.daemon.read()
        assert reply.WhichOneof("kind") == "initialized", self.logged()
        return reply.initialized

    def connect(self, front: int, token: str = TOKEN) -> Peer:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect("\0" + self.front_address[1:])
        peer = self.peer(sock)
        peer.send(wpb.DaemonToWorker(front_hello=wpb.FrontHello(token=token, front=front)))
        return peer

    def peer(self, sock: socket.socket) -> Peer:
        peer = Peer(sock)
        self.peers.append(peer)
        return peer

    def request(
        self, request_id: int, value: float, count: int = 1, shape: list[int] | None = None
    ) -> wpb.Request:
        data = np.full(count, value, np.float32).tobytes()
        block = self.inputs.allocate(len(data))
        block.view()[:] = data
        ref = wpb.TensorRef(
            name="IN", datatype="FP32", shape=shape or [count], region=block.segment.name,
            offset=block.offset, nbytes=len(data),
        )  # fmt: skip
        return wpb.Request(request_id=request_id, id=f"r{request_id}", inputs=[ref])

    def execute(self, batch_id: int, *requests: wpb.Request) -> wpb.DaemonToWorker:
        return wpb.DaemonToWorker(execute=wpb.Execute(batch_id=batch_id, requests=requests))

    def output(self, ref: wpb.TensorRef) -> list[float]:
        view = self.outputs.view(ref.region, ref.offset, ref.nbytes)
        return np.frombuffer(view, np.float32).tolist()

    def logged(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        try:
            self.daemon.send(wpb.DaemonToWorker(finalize=wpb.Finalize()))
            assert self.daemon.read().WhichOneof("kind") == "finalized"
            assert self.process.wait(WAIT_S) == 0, self.logged()
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(WAIT_S)
            for peer in self.peers:
                peer.close()
            self.daemon.close()
            self.server.close()
            self.outputs.close()
            self.inputs.close()


Start = Callable[..., Worker]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """``start(name, decoupled, reconnect)``: a worker, finalized (and checked to exit 0)
    afterwards."""
    started: list[Worker] = []

    def make(
        name: str = "m",
        decoupled: bool = False,
        reconnect: bool = False,
        model: str = MODEL,
        config: dict[str, object] | None = None,
    ) -> Worker:
        worker = Worker(tmp_path, name, decoupled, reconnect, model, config)
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop()


B0 = front_base(0)  # front 0's ids are B0 + 1, B0 + 2, ...
B1 = front_base(1)


def test_a_front_links_result_comes_back_on_its_link_and_not_to_the_daemon(start: Start) -> None:
    worker = start()
    front = worker.connect(0)
    front.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.5), worker.request(B0 + 2, 2.0)))
    reply = front.read()
    assert reply.WhichOneof("kind") == "result", worker.logged()
    assert reply.result.batch_id == B0 + 1
    assert [r.request_id for r in reply.result.responses] == [B0 + 1, B0 + 2]
    assert [worker.output(r.outputs[0]) for r in reply.result.responses] == [[3.0], [4.0]]
    front.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B0 + 1])))
    # The daemon's link serves as before meanwhile, its results on its own link.
    worker.daemon.send(worker.execute(7, worker.request(7, 5.0)))
    reply = worker.daemon.read()
    assert reply.result.batch_id == 7 and worker.output(reply.result.responses[0].outputs[0]) == [
        10.0
    ]
    assert front.silent() and worker.daemon.silent()
    front.close()


def test_two_front_ends_each_get_their_own_results(start: Start) -> None:
    worker = start()
    first, second = worker.connect(0), worker.connect(1)
    second.send(worker.execute(B1 + 1, worker.request(B1 + 1, 1.0)))
    first.send(worker.execute(B0 + 1, worker.request(B0 + 1, 2.0)))
    assert second.read().result.batch_id == B1 + 1
    assert first.read().result.batch_id == B0 + 1
    assert first.silent() and second.silent() and worker.daemon.silent()


@pytest.mark.parametrize(
    "hello",
    [
        wpb.DaemonToWorker(front_hello=wpb.FrontHello(token="wrong", front=0)),
        wpb.DaemonToWorker(front_hello=wpb.FrontHello(token="", front=0)),
        wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B0 + 1])),  # no hello first
    ],
    ids=["wrong-token", "no-token", "no-hello"],
)
def test_a_front_end_without_the_right_hello_is_refused(
    start: Start, hello: wpb.DaemonToWorker
) -> None:
    worker = start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + worker.front_address[1:])
    refused = worker.peer(sock)
    refused.send(hello, worker.execute(B0 + 1, worker.request(B0 + 1, 1.0)))
    assert refused.closed()
    assert "refused a front end" in worker.logged()
    # The worker goes on, for the daemon and for a front end with the token.
    accepted = worker.connect(0)
    accepted.send(worker.execute(B0 + 2, worker.request(B0 + 2, 1.0)))
    assert accepted.read().result.batch_id == B0 + 2
    assert worker.daemon.silent()


@pytest.mark.parametrize(
    "frame",
    [
        wpb.DaemonToWorker(execute=wpb.Execute(batch_id=B1 + 1)),  # front 1's batch
        wpb.DaemonToWorker(execute=wpb.Execute(batch_id=5)),  # the daemon's
        wpb.DaemonToWorker(release=wpb.Release(batch_ids=[B0 + 1, 3])),
        wpb.DaemonToWorker(execute=wpb.Execute(batch_id=B0 + 1, release=[B0 + 1, 3])),
        wpb.DaemonToWorker(cancel=wpb.CancelRequests(request_ids=[B1 + 2])),
        wpb.DaemonToWorker(finalize=wpb.Finalize()),  # not a front end's to send
        wpb.DaemonToWorker(ready_query=wpb.ReadyQuery(query=1)),
    ],
    ids=[
        "others-batch",
        "daemons-batch",
        "daemons-release",
        "daemons-release-on-a-batch",
        "others-cancel",
        "finalize",
        "ready-query",
    ],  # fmt: skip
)
def test_a_frame_a_front_end_may_not_send_closes_its_link(
    start: Start, frame: wpb.DaemonToWorker
) -> None:
    worker = start()
    front = worker.connect(0)
    front.send(frame)
    assert front.closed()
    # A request of front 0 with an input of front 1's range closes it too.
    again = worker.connect(0)
    again.send(worker.execute(B0 + 1, worker.request(B1 + 1, 1.0)))
    assert again.closed()
    # The worker serves on: the daemon, and front 0 connected anew.
    worker.daemon.send(worker.execute(1, worker.request(1, 1.0)))
    assert worker.daemon.read().result.batch_id == 1
    third = worker.connect(0)
    third.send(worker.execute(B0 + 2, worker.request(B0 + 2, 1.0)))
    assert third.read().result.batch_id == B0 + 2
    assert worker.process.poll() is None


def test_a_closed_front_link_frees_the_output_blocks_it_held(start: Start) -> None:
    """Four 1 KiB outputs held by a front end that goes away fill the first segment (4 KiB):
    the worker frees them, so the next front end's four outputs land where those were. A
    fifth, with those four held, goes to a new segment: what a leak would have looked like."""
    worker = start()
    gone = worker.connect(0)
    held: list[wpb.TensorRef] = []
    for n in range(1, 5):
        gone.send(worker.execute(B0 + n, worker.request(B0 + n, float(n), 256)))
        held.append(gone.read().result.responses[0].outputs[0])
    assert {r.region for r in held} == {held[0].region}
    gone.close()

    front = worker.connect(1)
    later: list[wpb.TensorRef] = []
    for n in range(1, 6):
        front.send(worker.execute(B1 + n, worker.request(B1 + n, float(n), 256)))
        result = front.read().result
        assert not result.responses[0].HasField("error"), result
        later.append(result.responses[0].outputs[0])
    assert sorted((r.region, r.offset) for r in later[:4]) == sorted(
        (r.region, r.offset) for r in held
    )
    assert later[4].region != held[0].region
    assert worker.output(later[4]) == [10.0] * 256


def test_the_arena_of_a_front_end_that_is_gone_is_let_go_by_the_worker(start: Start) -> None:
    """A front end's arena is a memfd the worker maps when it reads inputs there: once that
    front end has let go of it and its link closes, the worker unmaps it too, or the worker's
    mapping alone would keep its memory (for as long as the worker lives)."""
    worker = start()
    arena = Arena(f"pbdtest-front-{worker.tag}-", 1 << 16, 1 << 16)
    front = worker.connect(0)
    block = arena.allocate(4)
    block.view()[:] = np.float32(1.0).tobytes()
    ref = wpb.TensorRef(
        name="IN", datatype="FP32", shape=[1], region=block.segment.name,
        offset=block.offset, nbytes=4,
    )  # fmt: skip
    front.send(worker.execute(B0 + 1, wpb.Request(request_id=B0 + 1, inputs=[ref])))
    reply = front.read()
    assert worker.output(reply.result.responses[0].outputs[0]) == [2.0]
    base = f"pbdtest-front-{worker.tag}-0"
    assert list(held_segments(base)) == [base]
    arena.close()  # the front end exits: only the worker's mapping is left
    assert list(held_segments(base)) == [base]
    front.close()
    deadline = time.monotonic() + WAIT_S
    while held_segments(base) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(held_segments(base)) == [], worker.logged()


def test_a_front_end_connecting_again_replaces_its_old_link(start: Start) -> None:
    worker = start()
    old = worker.connect(0)
    old.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, 256)))
    first = old.read().result.responses[0].outputs[0]
    new = worker.connect(0)
    assert old.closed()  # closed for the new one, its held output freed
    new.send(worker.execute(B0 + 2, worker.request(B0 + 2, 1.0, 256)))
    again = new.read().result.responses[0].outputs[0]
    assert (again.region, again.offset) == (first.region, first.offset)


@pytest.mark.parametrize("name", ["m", "async_m"])
def test_response_sender_responses_go_to_the_front_link(start: Start, name: str) -> None:
    """A decoupled model answers with its response sender, from a thread or from a coroutine
    (then the main loop reads the front link through the worker's event loop)."""
    worker = start(name, decoupled=True)
    front = worker.connect(0)
    front.send(
        worker.execute(B0 + 1, worker.request(B0 + 1, 1.0, 256)),
        worker.execute(B0 + 2, worker.request(B0 + 2, 2.0, 256)),
    )
    got = [front.read() for _ in range(4)]
    results = [m.result for m in got if m.WhichOneof("kind") == "result"]
    streamed = sorted(
        (m.streamed for m in got if m.WhichOneof("kind") == "streamed"),
        key=lambda s: s.request_id,
    )
    assert sorted(r.batch_id for r in results) == [B0 + 1, B0 + 2]
    assert all(r.responses[0].streamed for r in results)
    assert [(s.request_id, s.flags) for s in streamed] == [(B0 + 1, FINAL), (B0 + 2, FINAL)]
    assert [worker.output(s.response.outputs[0])[0] for s in streamed] == [2.0, 4.0]
    assert all(s.held for s in streamed)
    # Released by the front end: its next responses' blocks land where those were.
    front.send(wpb.DaemonToWorker(release=wpb.Release(batch_ids=[s.held for s in streamed])))
    places = {(s.response.outputs[0].region, s.response.outputs[0].offset) for s in streamed}
    front.send(
        worker.execute(B0 + 3, worker.request(B0 + 3, 3.0, 256)),
        worker.execute(B0 + 4, worker.request(B0 + 4, 4.0, 256)),
    )
    got = [front.read() for _ in range(4)]
    again = {
        (m.streamed.response.outputs[0].region, m.streamed.response.outputs[0].offset)
        for m in got
        if m.WhichOneof("kind") == "streamed"
    }
    assert again == places
    assert worker.daemon.silent()


def test_a_daemons_request_still_answers_to_the_daemon_with_a_front_link_open(start: Start) -> None:
    worker = start("m", decoupled=True)
    front = worker.connect(0)
    worker.daemon.send(worker.execute(3, worker.request(3, 1.0)))
    got = [worker.daemon.read() for _ in range(2)]
    assert sorted(str(m.WhichOneof("kind")) for m in got) == ["result", "streamed"]
    assert front.silent()


def test_the_front_links_follow_the_daemon_and_a_new_one_names_a_new_socket(start: Start) -> None:
    """The daemon goes away (a worker that outlives it, ``--reconnect-secs``): the listener and
    the links close with its connection; the daemon that adopts the worker names the socket to
    listen on now."""
    worker = start(reconnect=True)
    front = worker.connect(0)
    front.send(worker.execute(B0 + 1, worker.request(B0 + 1, 1.0)))
    assert front.read().result.batch_id == B0 + 1
    old_address = worker.front_address
    worker.daemon.close()
    assert front.closed()
    worker.front_address = worker.init.front_socket = f"@pbd-test-front-{worker.tag}-again"
    assert worker.attach().adopted
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as late,
        pytest.raises(ConnectionRefusedError),
    ):
        late.connect("\0" + old_address[1:])
    again = worker.connect(0)
    again.send(worker.execute(B0 + 2, worker.request(B0 + 2, 2.0)))
    result = again.read().result
    assert result.batch_id == B0 + 2 and worker.output(result.responses[0].outputs[0]) == [4.0]
    assert worker.daemon.silent()


# -- FrontConnections in this process: what a worker process does not show ------------------


class _Holder:
    def __init__(self) -> None:
        self.released: list[int] = []
        self.sweeps = 0

    def held_batches(self) -> list[int]:
        return []

    def release(self, batch_ids: list[int]) -> None:
        self.released += batch_ids

    def sweep_inputs(self) -> None:
        self.sweeps += 1


class _Live:
    def live_ids(self) -> list[int]:
        return []

    def cancel(self, request_ids: list[int]) -> None:
        pass


@pytest.fixture
def fronts() -> Iterator[tuple[FrontConnections, str]]:
    links = FrontConnections(lambda *m: None, _Holder, _Live)
    address = f"@pbd-test-fronts-{os.getpid()}-{next(_names)}"
    links.listen(address, TOKEN)
    assert links.listener is not None
    try:
        yield links, address
    finally:
        links.close()


def _connect(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + address[1:])
    sock.settimeout(WAIT_S)
    return sock


def test_a_connection_that_says_nothing_is_closed_after_the_hello_timeout(
    fronts: tuple[FrontConnections, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(front_connections, "HELLO_TIMEOUT_S", 0.2)
    links, address = fronts
    silent = _connect(address)
    daemon_end, daemon = socket.socketpair()
    waiting = threading.Thread(target=links.wait, args=(daemon,), daemon=True)
    began = time.monotonic()
    waiting.start()
    try:
        assert silent.recv(1) == b""  # closed by the worker's wait, the daemon silent
        assert 0.2 <= time.monotonic() - began < WAIT_S
    finally:
        daemon_end.sendall(b"x")  # the daemon's socket readable: wait returns
        waiting.join(WAIT_S)
        daemon.close()
        daemon_end.close()
        silent.close()
    assert not waiting.is_alive()


def test_a_forked_child_closes_its_copies_of_the_front_links(
    fronts: tuple[FrontConnections, str],
) -> None:
    links, address = fronts
    base = front_base(2)
    front = _connect(address)
    hello = wpb.DaemonToWorker(front_hello=wpb.FrontHello(token=TOKEN, front=2))
    release = wpb.DaemonToWorker(release=wpb.Release(batch_ids=[base + 1]))
    front.sendall(frames(hello, release))
    daemon_end, daemon = socket.socketpair()
    with daemon_end, daemon, front:
        assert links.wait(daemon) is False  # front 2's frame is here
        taken = links.take()
        assert taken is not None and taken[1] == release
        link = taken[0]
        pid = os.fork()
        if pid == 0:  # the child: nothing of the worker's left open
            ok = links.listener is None and not links.links and link.sock.fileno() == -1
            os._exit(0 if ok and link.closed else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's link is still up (the child did not shut it down), both ways.
        assert link.send([wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat(executed=4))])
        assert SocketFrameReader(front).read() is not None
        front.sendall(frames(release))
        assert links.wait(daemon) is False
        assert links.take() == (link, release)
