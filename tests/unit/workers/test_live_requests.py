"""pbd_worker.live_requests: a batch's requests start together (live, executing, with their
cancellation flags), and finish together with those execute() answered."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from pbd_wire import front_base
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.shm import Arena, SegmentMap
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.executor import BatchExecutor
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.live_requests import RESPONSES_AHEAD, LiveRequests
from pbd_worker.model_api import state
from pbd_worker.model_api.request import InferenceRequest


def _request() -> InferenceRequest:
    return InferenceRequest._from_runtime(
        inputs=[], request_id="r", correlation_id=1, requested_output_names=[], flags=0,
        timeout=0, parameters_json="{}", model_name="m", model_version=1, trace_context=None,
    )  # fmt: skip


def test_a_batch_starts_live_and_executing_with_its_cancellation_flags(tmp_path: Path) -> None:
    flags = CancelFlags.create("pbdtest-cancel")
    try:
        live = LiveRequests(lambda *sent: None, decoupled=False)
        live.flags = flags
        msgs = [wpb.Request(request_id=7), wpb.Request(request_id=9)]
        requests = [_request(), _request()]
        live.start_batch([7, 9], msgs, requests)
        assert [r._uid for r in requests] == [7, 9]  # type: ignore[attr-defined]
        assert sorted(live._live) == [7, 9] and live._executing == {7, 9}
        assert live._live[9] == (requests[1], msgs[1])
        flags.cancel(9)
        assert [r.is_cancelled() for r in requests] == [False, True]
    finally:
        flags.close()


def test_a_decoupled_batch_starts_live_but_not_executing() -> None:
    live = LiveRequests(lambda *sent: None, decoupled=True)
    requests = [_request()]
    live.start_batch([3], [wpb.Request(request_id=3)], requests)
    assert sorted(live._live) == [3] and live._executing == set()
    assert not requests[0].is_cancelled()  # no cancellation page: only a CancelRequests frame
    live.cancel([3])
    assert requests[0].is_cancelled()


def test_finishing_a_batch_ends_the_answered_requests_and_returns_the_kept_responses() -> None:
    sent: list[wpb.WorkerToDaemon] = []
    live = LiveRequests(lambda *frames: sent.extend(frames), decoupled=False)
    requests = [_request(), _request(), _request()]
    live.start_batch([1, 2, 3], [wpb.Request(request_id=i) for i in (1, 2, 3)], requests)
    # Request 2's sender sends without the final flag while execute() runs: kept.
    kept = wpb.StreamedResponse(request_id=2)
    live._unfinished[2] = kept
    unfinished = live.finish_execute([1, 2, 3], answered=[1])
    assert unfinished == {2: kept} and live._unfinished == {}
    assert sorted(live._live) == [2, 3]  # 1 was answered by execute(): done
    assert live._executing == set()  # responses their senders send now leave at once
    assert sent == []


def test_finishing_a_decoupled_batch_returns_nothing_and_ends_nothing_unanswered() -> None:
    live = LiveRequests(lambda *sent: None, decoupled=True)
    live.start_batch([1], [wpb.Request(request_id=1)], [_request()])
    assert live.finish_execute([1]) == {}
    assert sorted(live._live) == [1]  # its sender answers it, later


class _Tokens:
    """A decoupled model that sends ``count`` tokens from a thread as fast as it can."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.threads: list[threading.Thread] = []
        # Set once execute() returned: sends while it runs are not paced (the main thread
        # reads no release then), and these tests are about the ones after.
        self.go = threading.Event()

    def execute(self, requests: list[InferenceRequest]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            thread = threading.Thread(target=self._stream, args=(sender,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _stream(self, sender: object) -> None:
        self.go.wait(10)
        for i in range(self.count):
            token = pb_utils.Tensor("OUT", np.array([i], np.int32))
            sender.send(pb_utils.InferenceResponse([token]))  # type: ignore[attr-defined]
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # type: ignore[attr-defined]


class _Inline:
    """A decoupled model that sends its tokens from execute() itself (the main thread)."""

    def execute(self, requests: list[InferenceRequest]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            for i in range(10):
                token = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse([token]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


FROM_A_FRONT_END = front_base(0) + 7  # a request on the direct path
FROM_THE_DAEMON = 7


@contextlib.contextmanager
def _streaming(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    request_id: int,
    model: _Tokens | _Inline | None = None,
) -> Iterator[tuple[BatchExecutor, _Tokens | _Inline, list[int]]]:
    """A decoupled request of ``model`` (default: ``_Tokens(count)``) run by a real
    executor; the held ids of the responses its sender sent, as they leave. Its arena and
    loop are closed at the end."""
    held: list[int] = []

    def send(*frames: wpb.WorkerToDaemon) -> None:
        held.extend(frame.streamed.held for frame in frames if frame.streamed.held)

    model = model if model is not None else _Tokens(count)
    live = LiveRequests(send, decoupled=True)
    monkeypatch.setattr(state, "response_sender_factory", live.sender_for)
    arena = Arena("pbdtest-paced", 1 << 16, 1 << 16)
    aio = WorkerLoop(DaemonLink("@unused", lambda: None))
    executor = BatchExecutor(
        model, instance_name="m_0", model_name="m", model_version=1,
        inputs=SegmentMap(str(tmp_path)), outputs=arena,
        aio=aio, live=live,
    )  # fmt: skip
    try:
        executor.run(wpb.Execute(batch_id=1, requests=[wpb.Request(request_id=request_id)]))
        if isinstance(model, _Tokens):
            model.go.set()
        yield executor, model, held
    finally:
        arena.close()
        aio.loop.close()


def _until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_decoupled_sender_waits_while_its_reader_holds_too_many_responses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RESPONSES_AHEAD responses leave, then the model's thread waits in send(); each
    release lets one more go, and the stream ends whole."""
    with _streaming(tmp_path, monkeypatch, 10, FROM_A_FRONT_END) as (executor, model, held):
        _until(lambda: len(held) == RESPONSES_AHEAD)
        time.sleep(0.05)  # it would have sent them all by now: it waits
        assert len(held) == RESPONSES_AHEAD
        executor.release([held[0]])
        _until(lambda: len(held) == RESPONSES_AHEAD + 1)
        while model.threads[0].is_alive():
            executor.release(held[:])
            time.sleep(0.001)
        assert len(held) == 10


def test_a_sender_whose_request_ended_does_not_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request's reader went away (its link closed: the request is no longer live):
    the model's thread is not held for releases that will not come."""
    with _streaming(tmp_path, monkeypatch, 10, FROM_A_FRONT_END) as (executor, model, held):
        _until(lambda: len(held) == RESPONSES_AHEAD)
        executor.live.done(FROM_A_FRONT_END)
        model.threads[0].join(5)
        assert not model.threads[0].is_alive()


def test_a_request_the_daemon_sent_is_not_paced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BLS call's caller may keep every response until the stream ends: the daemon's
    requests stream on without waiting for releases."""
    with _streaming(tmp_path, monkeypatch, 10, FROM_THE_DAEMON) as (executor, model, held):
        model.threads[0].join(5)
        assert not model.threads[0].is_alive()
        assert len(held) == 10


def test_a_cancelled_request_does_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that left: its responses may never be released, and the model must get to
    see is_cancelled() rather than wait in send()."""
    with _streaming(tmp_path, monkeypatch, 10, FROM_A_FRONT_END) as (executor, model, held):
        _until(lambda: len(held) == RESPONSES_AHEAD)
        executor.live.cancel([FROM_A_FRONT_END])
        model.threads[0].join(5)
        assert not model.threads[0].is_alive()


def test_a_sender_on_the_main_thread_never_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread reads the releases: a send there (from execute(), or an async
    execute on the worker's loop) goes at once, else the worker would wait for itself."""
    with _streaming(tmp_path, monkeypatch, 10, FROM_A_FRONT_END, _Inline()) as (executor, _, held):
        assert len(held) == 10  # all sent while run() ran


class _Eager(_Tokens):
    """A decoupled model whose sending thread, started in execute(), sends at once, while
    execute() still runs a moment (the GIL let go, as a model's last steps may)."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.go.set()

    def execute(self, requests: list[InferenceRequest]) -> None:
        super().execute(requests)
        time.sleep(0.001)


def test_a_thread_started_in_execute_is_paced_once_execute_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread runs before the main thread has the GIL back to return from execute():
    past its window it waits for that return (IN_EXECUTE_WAIT_S), then for releases, instead
    of sending its whole burst while execute() is still, for a moment, running."""
    with _streaming(tmp_path, monkeypatch, 40, FROM_A_FRONT_END, _Eager(40)) as (
        executor,
        model,
        held,
    ):
        _until(lambda: len(held) >= RESPONSES_AHEAD)
        time.sleep(0.05)  # it would have sent them all by now: it waits
        assert len(held) <= RESPONSES_AHEAD + 4  # a few more only if the main thread lagged
        while model.threads[0].is_alive():
            executor.release(held[:])
            time.sleep(0.001)
        assert len(held) == 40


class _Joined(_Tokens):
    """A decoupled model whose execute() waits for the threads that send its tokens."""

    def execute(self, requests: list[InferenceRequest]) -> None:
        self.go.set()  # sending while execute() runs is the point here
        super().execute(requests)
        for thread in self.threads:
            thread.join()


def test_a_sender_does_not_wait_while_execute_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """execute() waits for its own sending thread: the main thread reads no release until
    it returns, so the thread must not wait for one for ever (IN_EXECUTE_WAIT_S a response
    past its window, then it goes on)."""
    model = _Joined(10)
    with _streaming(tmp_path, monkeypatch, 10, FROM_A_FRONT_END, model) as (executor, _, held):
        assert len(held) == 10  # all sent before run() returned
