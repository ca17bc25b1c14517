"""The worker must start fast: its entry point pulls in neither grpc nor the daemon; the wire
between them belongs to neither."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


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
        "from pbd_wire import worker_pb2 as wpb;"
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


def test_the_wire_imports_neither_side():
    """pbd_wire is shared by the daemon and the worker: it may import neither, nor grpc."""
    code = (
        "import sys, pkgutil, importlib, pbd_wire;"
        "[importlib.import_module('pbd_wire.' + m.name)"
        " for m in pkgutil.iter_modules(pbd_wire.__path__)];"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('grpc', 'pbd', 'pbd_worker')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# The worker modules the daemon may import (see pbd_worker's docstring); the rest is private.
DAEMON_MAY_IMPORT = {"pbd_worker", "pbd_worker.notify", "pbd_worker.logconfig"}


def test_the_daemon_imports_only_the_workers_public_modules():
    service = Path(__file__).resolve().parents[3] / "service" / "pbd"
    found = set()
    for path in service.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found |= {(n, path.name) for n in names if n.split(".")[0] == "pbd_worker"}
    private = sorted((name, where) for name, where in found if name not in DAEMON_MAY_IMPORT)
    assert not private, f"the daemon imports private worker modules: {private}"
