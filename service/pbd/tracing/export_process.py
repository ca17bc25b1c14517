"""The exporter process: spans the daemon ships (``pbd.tracing.shipper``) leave for the
OTLP endpoint from here.

    python -m pbd.tracing.export_process '<--trace-config options as JSON>'

Reads length-prefixed ``marshal`` frames from stdin, each a list of items ``shipper.to_wire``
made: OTLP bytes (worker spans) or a request's record, written as OTLP bytes here. They go
to the SDK's ``BatchSpanProcessor`` with pbd's OTLP exporter, configured as the daemon would
have been (``bsp_*`` and ``url`` options, ``OTEL_*`` environment). At EOF on stdin it exports
what it holds and exits.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import signal
import sys
from typing import Any

from pbd.tracing.encode import encode_record
from pbd.tracing.records import EncodedSpans, WorkerSpans
from pbd_wire.framing import HEADER, decode_length
from pbd_worker.logconfig import LogConfig, apply

NICE = 10  # added to the daemon's niceness


def from_wire(item: Any) -> EncodedSpans | WorkerSpans:
    if isinstance(item, bytes):
        return WorkerSpans(item)
    return EncodedSpans(*encode_record(item))


def _read_exact(stream: Any, n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _exporter(options: dict[str, list[str]]) -> Any:
    from pbd.tracing.provider import _resource, otlp_protocol

    urls = options.get("url")
    url = urls[-1] if urls else None
    if otlp_protocol(options, os.environ) == "http/protobuf":
        from pbd.tracing.export_http import OtlpHttpSpanExporter

        return OtlpHttpSpanExporter(_resource(options), url, os.environ)
    from pbd.tracing.export import PbdOTLPSpanExporter

    return PbdOTLPSpanExporter(_resource(options), **({"endpoint": url} if url else {}))


def main(argv: list[str] | None = None) -> int:
    from pbd.tracing.provider import batch_processor

    # The SDK's and the exporters' complaints read like the daemon's lines (time, level).
    apply(LogConfig(), "span exporter")
    args = sys.argv[1:] if argv is None else argv
    options: dict[str, list[str]] = json.loads(args[0]) if args else {}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when this ends
    # Telemetry yields to serving: on a saturated machine the daemon and its workers get the
    # CPU first; this process catches up when there is room (its queue is bounded: past it,
    # spans are dropped, as the SDK's batch processor drops them).
    with contextlib.suppress(OSError):
        os.nice(NICE)
    processor = batch_processor(_exporter(options), options)
    stdin = sys.stdin.buffer
    try:
        while (header := _read_exact(stdin, HEADER.size)) is not None:
            payload = _read_exact(stdin, decode_length(header))
            if payload is None:
                break
            for item in marshal.loads(payload):
                processor.on_end(from_wire(item))  # type: ignore[arg-type]
    finally:
        processor.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
