"""pbd_worker.live_requests: a batch's requests start together (live, executing, with their
cancellation flags), and finish together with those execute() answered."""

from __future__ import annotations

from pathlib import Path

from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_worker.live_requests import LiveRequests
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
