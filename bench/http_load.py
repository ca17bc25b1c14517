"""A closed-loop HTTP/REST infer load with tritonclient.http, the client most users run.

``concurrency`` threads, each with its own ``tritonclient.http.InferenceServerClient`` (one
keep-alive connection), send the same FP32 ``INPUT0`` (as JSON ``data`` or with the binary
tensor data extension) and ask for ``OUTPUT0`` the same way; each waits for its answer and
sends the next. The window is ``bench.loadgen``'s: ``warmup`` seconds not counted, then
``duration`` seconds measured, bounded by time and by ``max_requests``. A probe answer before
the load and every ``check_every``-th answer during it are compared with the input. The
client costs the same for every server (the same code and requests), so the servers' rates
compare; its own CPU, in Python, bounds what one client process can send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
import tritonclient.http as httpclient

from bench.loadgen import LoadStats, ResponseMismatch, Window, summarize

CALL_TIMEOUT_S = 30.0


class _Caller:
    """One connection and the request it sends."""

    def __init__(self, url: str, model: str, data: np.ndarray, binary: bool) -> None:
        self.client = httpclient.InferenceServerClient(
            url, connection_timeout=CALL_TIMEOUT_S, network_timeout=CALL_TIMEOUT_S
        )
        self.model, self.data = model, data
        self.inputs = [httpclient.InferInput("INPUT0", list(data.shape), "FP32")]
        self.inputs[0].set_data_from_numpy(data, binary_data=binary)
        self.outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]

    def call(self) -> np.ndarray | None:
        result = self.client.infer(self.model, self.inputs, outputs=self.outputs)
        return result.as_numpy("OUTPUT0")

    def check(self, answer: np.ndarray | None) -> None:
        if answer is None or not np.array_equal(answer, self.data):
            raise ResponseMismatch("OUTPUT0 differs from INPUT0")

    def close(self) -> None:
        self.client.close()


def run_http_load(
    url: str,
    model: str,
    data: np.ndarray,
    *,
    binary: bool,
    concurrency: int,
    duration: float,
    warmup: float,
    max_requests: int = 200_000,
    check_every: int = 64,
    clocks: Mapping[str, Callable[[], float]] | None = None,
) -> LoadStats:
    """Measure one closed-loop window against the HTTP address ``url`` (host:port); a wrong
    first answer raises :class:`ResponseMismatch`."""
    window = Window({"client": time.process_time, **(clocks or {})})
    lock = threading.Lock()
    probed = threading.Event()  # the first answer was checked (or could not be had)
    probe_error: list[BaseException] = []

    def worker(first: bool) -> None:
        # A client per thread, made in it: geventhttpclient's sockets belong to their thread.
        caller = _Caller(url, model, data, binary)
        try:
            if first:
                try:
                    caller.check(caller.call())
                except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
                    probe_error.append(exc)
                finally:
                    probed.set()
            probed.wait()
            while not probe_error:
                with lock:
                    if window.closed or window.sent >= max_requests:
                        return
                    window.sent += 1
                began = time.perf_counter()
                try:
                    answer = caller.call()
                except Exception as exc:  # noqa: BLE001 - every failure counts, the first is kept
                    with lock:
                        window.errors += 1
                        window.first_error = window.first_error or repr(exc)
                    continue
                ended = time.perf_counter()
                with lock:
                    window.completions += 1
                    checking = window.completions % check_every == 0
                    if window.start <= ended <= window.end:
                        window.latencies.append(ended - began)
                if checking:
                    try:
                        caller.check(answer)
                    except ResponseMismatch:
                        with lock:
                            window.mismatches += 1
        finally:
            caller.close()

    threads = [threading.Thread(target=worker, args=(i == 0,), daemon=True)
               for i in range(concurrency)]  # fmt: skip
    for thread in threads:
        thread.start()
    probed.wait(CALL_TIMEOUT_S)
    if probe_error:
        raise probe_error[0]
    time.sleep(warmup)
    with lock:
        window.open()
    time.sleep(duration)
    with lock:
        window.close()
    for thread in threads:
        thread.join(CALL_TIMEOUT_S + 5)
    capped = window.sent >= max_requests
    cpu_s = {name: window.cpu_at_end[name] - start for name, start in window.cpu_at_start.items()}
    stats = summarize(window.latencies, max(0.0, window.end - window.start),
                      window.errors, window.mismatches)  # fmt: skip
    return replace(stats, capped=capped, first_error=window.first_error, cpu_s=cpu_s)
