"""Spans leave the daemon through an exporter process, so exporting costs the serving loop
(almost) nothing.

Encoding OTLP and running the exporter's gRPC client took about half of tracing's CPU per
request, all of it under the daemon's GIL, next to the event loop that answers clients.
``ProcessSpanProcessor`` is the span processor the daemon's provider gets instead of the SDK's
``BatchSpanProcessor``: ``on_end`` only appends to a bounded queue; a thread ships the queue
every ``SHIP_INTERVAL_S`` (or when a batch is full) as one ``marshal``-ed frame on the stdin of
``python -m pbd.tracing.export_process`` (started with the first spans, so a daemon that traces
nothing runs none), which writes the requests' records (plain tuples, ``records.RECORD_FIELDS``)
as OTLP bytes and feeds them to the SDK's batch processor and pbd's OTLP exporter
(``pbd.tracing.export``) with the daemon's ``--trace-config`` options and ``OTEL_*``
environment. Worker spans (OTLP bytes already) pass through as they are.

The queue holds at most ``max_queue_size`` items (``bsp_max_queue_size``, as the SDK's
processor): past that, spans are dropped and counted, never waited for. The exporter process
exits when its stdin closes (the daemon stopped, or died: the pipe closes with it) after
exporting what it holds. If it dies, the batch in hand is dropped, the loss logged, and a new
one started (at most one start per ``RESTART_INTERVAL_S``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import marshal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from pbd.tracing.records import WorkerSpans
from pbd_wire.framing import encode_frame

log = logging.getLogger("pbd.tracing")
SHIP_INTERVAL_S = 0.05
RESTART_INTERVAL_S = 5.0
DEFAULT_MAX_QUEUE = 2048
DEFAULT_MAX_BATCH = 512


def to_wire(item: Any) -> Any:
    """A queued item as plain values ``marshal`` takes (``export_process.from_wire`` inverts):
    a request's record is one already."""
    if isinstance(item, tuple):
        return item
    if isinstance(item, WorkerSpans):
        return item.otlp
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans([item]).SerializeToString()  # an SDK span: OTLP bytes too


class ProcessSpanProcessor(SpanProcessor):
    def __init__(
        self,
        options: Mapping[str, list[str]],
        *,
        max_queue_size: int = DEFAULT_MAX_QUEUE,
        max_batch: int = DEFAULT_MAX_BATCH,
        ship_interval: float = SHIP_INTERVAL_S,
        python: str = sys.executable,
    ) -> None:
        self.command = [
            python,
            "-m",
            "pbd.tracing.export_process",
            json.dumps({k: list(v) for k, v in options.items()}),
        ]
        self.max_queue_size = max_queue_size
        self.max_batch = max_batch
        self.ship_interval = ship_interval
        self.dropped = 0
        self._queue: collections.deque[Any] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        # The shipping thread waits for a first span with no timeout (an idle daemon does
        # not wake for it): the span that finds it so wakes it.
        self._idle = False
        self._process: subprocess.Popen[bytes] | None = None
        self._started_at = -RESTART_INTERVAL_S
        self._thread = threading.Thread(target=self._ship_loop, name="span shipper", daemon=True)
        self._thread.start()

    # -- SpanProcessor ---------------------------------------------------------------------

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan | tuple[Any, ...] | WorkerSpans) -> None:
        if len(self._queue) >= self.max_queue_size:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10000 == 0:
                log.warning(
                    "span export queue full (%d items): %d dropped so far",
                    self.max_queue_size,
                    self.dropped,
                )
            return
        self._queue.append(span)
        if self._idle or len(self._queue) >= self.max_batch:
            with self._wake:
                self._wake.notify()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._wake:
            self._wake.notify()
        while self._queue and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue

    def shutdown(self) -> None:
        """Ship what is queued, close the exporter's stdin and wait for it to export."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=5.0)
        process = self._process
        if process is None:
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            log.warning("span exporter (pid %d) did not finish in 10s; killed", process.pid)
            process.kill()
            process.wait()

    # -- shipping ----------------------------------------------------------------------------

    def _start_process(self) -> None:
        self._started_at = time.monotonic()
        self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE)  # noqa: S603
        log.info("span exporter started (pid %d)", self._process.pid)

    def _ship_loop(self) -> None:
        while True:
            with self._wake:
                if not self._stopping and not self._queue:
                    # Said before the queue is looked at: a span appended meanwhile is
                    # either seen here or finds the flag and wakes the wait.
                    self._idle = True
                    if not self._queue:
                        self._wake.wait()
                    self._idle = False
                if not self._stopping and len(self._queue) < self.max_batch:
                    self._wake.wait(self.ship_interval)  # the first span's company
                stopping = self._stopping
            while self._queue:
                self._ship(self._take())
            if stopping:
                return

    def _take(self) -> list[Any]:
        batch: list[Any] = []
        queue = self._queue
        while queue and len(batch) < self.max_batch:
            batch.append(to_wire(queue.popleft()))
        return batch

    def _ship(self, batch: list[Any]) -> None:
        process = self._process
        if process is None:  # the first spans: a daemon that traces nothing starts no process
            self._start_process()
            process = self._process
        elif process.poll() is not None:
            if time.monotonic() - self._started_at < RESTART_INTERVAL_S:
                self.dropped += len(batch)
                return
            log.error(
                "span exporter exited (%s); %d spans dropped so far; starting a new one",
                process.returncode,
                self.dropped,
            )
            self._start_process()
            process = self._process
        assert process is not None
        stdin: IO[bytes] | None = process.stdin
        try:
            assert stdin is not None
            stdin.write(encode_frame(marshal.dumps(batch)))
            stdin.flush()
        except (OSError, ValueError):
            self.dropped += len(batch)
