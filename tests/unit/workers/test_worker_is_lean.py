"""The worker must start fast: its entry point pulls in neither grpc nor the daemon."""

from __future__ import annotations

import subprocess
import sys


def test_worker_entry_point_imports_no_grpc_and_no_daemon():
    code = (
        "import sys, pbd_worker.runtime, triton_python_backend_utils;"
        "bad = [m for m in sys.modules if m == 'grpc' or m.startswith(('grpc.', 'pbd.'))"
        " or m == 'pbd' or m.startswith('opentelemetry.exporter')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tracing_loads_no_exporter_and_waits_for_a_traced_request():
    code = (
        "import sys, pbd_worker.runtime;"
        "assert 'opentelemetry.sdk' not in sys.modules, 'SDK loaded before any traced request';"
        "from pbd_worker.tracing import WorkerTracing;"
        "t = WorkerTracing();"
        "from opentelemetry import trace;"
        "from pbd_worker._proto import worker_pb2 as wpb;"
        "report = wpb.ExecuteSpan();"
        "tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';"
        "ctx = t.execute_span([tp], report);"
        "ctx.__enter__();"
        "trace.get_tracer('m').start_span('model.work').end();"
        "ctx.__exit__(None, None, None);"
        "assert report.span_id and t.take_encoded();"
        "bad = [m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')"
        " or m.startswith('opentelemetry.exporter.otlp.proto.grpc')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
