"""The real daemon run inside the test process, for tests that need to see its spans.

Only the daemon shares the process (on its own thread and event loop); workers are
processes as always. The daemon is stopped the way SIGTERM stops it, and the test waits
for its thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import tritonclient.grpc as grpcclient
from pbd_harness import free_port, wait_until

from pbd.daemon import Daemon
from pbd.settings import Settings
from pbd.tracing.provider import Tracing

START_TIMEOUT_S = 120.0


@contextlib.contextmanager
def inprocess_daemon(
    repository: Path, shm_prefix: str, tracing: Tracing, models: list[str], **fields: object
) -> Iterator[str]:
    """Serve ``repository``; yields the gRPC url once every model in ``models`` is ready.
    No HTTP or metrics server unless ``fields`` (Settings') ask for one."""
    port = free_port()
    settings = Settings(
        model_repository=repository,
        grpc_port=port,
        shm_prefix=shm_prefix,
        **{"allow_http": False, "allow_metrics": False, **fields},  # type: ignore[arg-type]
    )
    loop = asyncio.new_event_loop()
    daemon = Daemon(settings, tracing)
    result: list[int] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        result.append(loop.run_until_complete(daemon.run()))
        loop.close()

    thread = threading.Thread(target=run, name="pbd daemon", daemon=True)
    thread.start()
    url = f"127.0.0.1:{port}"
    try:
        with grpcclient.InferenceServerClient(url) as client:

            def ready() -> bool:
                try:
                    return all(client.is_model_ready(m) for m in models)
                except Exception:  # noqa: BLE001 - not listening yet
                    return False

            wait_until(ready, START_TIMEOUT_S, f"in-process daemon to load {models}")
        yield url
    finally:
        if thread.is_alive():
            loop.call_soon_threadsafe(daemon.request_stop)
            thread.join(120)
    assert not thread.is_alive(), "in-process daemon did not stop"
    assert result == [0], f"in-process daemon exited with {result}"
