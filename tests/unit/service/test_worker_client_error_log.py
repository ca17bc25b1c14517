"""Failed batches in the log: one ERROR record each, until the instance's bucket runs dry;
then a count of what was left out, with the next record logged."""

from __future__ import annotations

import logging

import pytest

from pbd.worker_client import error_log
from pbd.worker_client.error_log import BURST, ErrorBucket, log_failed_batch
from pbd_wire import worker_pb2 as wpb

WHERE = "instance 'm_0_0' of model 'm' version 3"


def test_a_burst_then_a_count_of_the_suppressed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(error_log.time, "monotonic", lambda: now[0])
    bucket = ErrorBucket(updated=now[0])
    error = wpb.Error(code="INTERNAL", message="ValueError: boom", traceback="Traceback ...")
    with caplog.at_level(logging.INFO, logger="pbd.instances"):
        for _ in range(int(BURST) + 7):
            log_failed_batch(bucket, WHERE, error)
        assert len(caplog.records) == BURST
        now[0] += 1.0 / error_log.RATE_PER_S
        log_failed_batch(bucket, WHERE, error)
    assert all(r.levelno == logging.ERROR for r in caplog.records)
    first, last = caplog.records[0].getMessage(), caplog.records[-1].getMessage()
    assert first.startswith(f"{WHERE}: execute failed: ValueError: boom")
    assert "Traceback ..." in first
    assert "(7 similar errors suppressed)" in last


def test_cancelled_requests_are_no_failure(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pbd.instances"):
        log_failed_batch(ErrorBucket(), WHERE, wpb.Error(code="CANCELLED", message="gone"))
    assert caplog.records == []
