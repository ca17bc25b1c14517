"""A minimal OTLP trace receiver for the tracing benchmark: counts the spans it is sent.

    python -m bench.otlp_receiver PORT

Serves ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` on 127.0.0.1:PORT in
its own process (so receiving costs the load generator nothing); on SIGTERM prints
``spans=<n>`` and exits.
"""

from __future__ import annotations

import signal
import sys
import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class CountingReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans = 0

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            self.spans += n
        return trace_service_pb2.ExportTraceServiceResponse()


def main(argv: list[str] | None = None) -> int:
    port = int((argv or sys.argv[1:])[0])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    receiver = CountingReceiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=None).wait()
    print(f"spans={receiver.spans}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
