"""What an idle gap costs the worker's request path: CPU per request back to back, and after
the thread slept, beside a loop that touches almost no memory.

    python -m bench.cold_path [--requests 1000] [--gaps-ms 0.1,0.5,2]

At one request in flight a worker sleeps in ``recv`` between requests (for the client's, the
daemon's and the network's share of the round trip: about 2 ms on the 2-vCPU machines here).
What a request costs it then is not what a hot loop says. This runs the worker's own
``BatchExecutor.run`` on one Execute (decoded from its bytes; the bundled ``identity_fp32``
model, one FP32 [1,16] input read from shared memory, its output written into an arena, the
result encoded, the batch released), in this process with no socket, first back to back,
then each request after ``time.sleep(gap)``, and reports the thread's CPU time per request
(``time.thread_time_ns`` around the request only, so the sleep is not counted). The
reference is a pure-interpreter loop of similar length with the same gaps: what it loses
after a gap, any code loses there (the core's caches, branch predictors and clock, taken by
whatever ran meanwhile); what the request path loses beyond that comes from its footprint
(code, objects, protobuf and numpy state) going cold while the thread slept.
bench/README.md ("Fifth check") has what it showed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable

from bench.servers import ROOT
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Arena, SegmentMap
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.executor import BatchExecutor
from pbd_worker.ipc.daemon_link import DaemonLink

MODEL_DIR = ROOT / "examples" / "models" / "identity_fp32"
ELEMENTS = 16


def reference_work() -> int:
    """Interpreter work with a footprint of a few cache lines."""
    total = 0
    for i in range(3000):
        total += i
    return total


def per_request_us(step: Callable[[int], object], count: int, gap_s: float, first: int) -> float:
    """Mean thread CPU µs of ``step(i)``, each call after sleeping ``gap_s`` (0: none)."""
    spent = 0
    for i in range(first, first + count):
        if gap_s:
            time.sleep(gap_s)
        began = time.thread_time_ns()
        step(i)
        spent += time.thread_time_ns() - began
    return spent / count / 1000


def request_step() -> tuple[Callable[[int], object], Callable[[], None]]:
    """One Execute through a real BatchExecutor: the callable for request ``i``, and what
    closes its arena and event loop."""
    spec = importlib.util.spec_from_file_location("coldpath_model", MODEL_DIR / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)  # not in sys.modules: no name to clash
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    source = Arena("coldpath-in-", 1 << 20, 1 << 20)  # the daemon's side, zeroed
    block = source.allocate(4 * ELEMENTS)
    arena = Arena("coldpath-out-", 1 << 20, 1 << 20)
    aio = WorkerLoop(DaemonLink("@unused", lambda: None))
    inputs = SegmentMap()
    executor = BatchExecutor(
        model,
        instance_name="identity_fp32_0",
        model_name="identity_fp32",
        model_version=1,
        inputs=inputs,
        outputs=arena,
        aio=aio,
    )
    ref = wpb.TensorRef(
        name="INPUT0",
        datatype="FP32",
        shape=[1, ELEMENTS],
        region=block.segment.name,
        offset=block.offset,
        nbytes=4 * ELEMENTS,
    )
    frame = wpb.DaemonToWorker()
    frame.execute.batch_id = 1
    frame.execute.requests.add(request_id=1).inputs.append(ref)
    encoded = frame.SerializeToString()  # the daemon's work: done once, outside the measure

    def step(i: int) -> object:
        answer = wpb.WorkerToDaemon()
        executor.run(wpb.DaemonToWorker.FromString(encoded).execute, answer.result)
        if answer.result.responses[0].HasField("error"):
            raise RuntimeError(answer.result.responses[0].error.message)
        executor.release([1])  # released each time: the same ids serve every request
        return answer.SerializeToString()

    def close() -> None:
        arena.close()
        inputs.close()
        source.close()
        aio.loop.close()

    return step, close


def parse_gaps(text: str) -> list[float]:
    gaps = [float(part) for part in text.split(",") if part.strip()]
    if any(g <= 0 for g in gaps):
        raise argparse.ArgumentTypeError("gaps are positive milliseconds")
    return gaps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_path", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000, help="per measurement")
    parser.add_argument("--gaps-ms", type=parse_gaps, default=[0.1, 0.5, 2.0])
    opts = parser.parse_args(argv)
    step, close = request_step()
    try:
        for i in range(opts.requests):  # warm up: imports, arena, caches
            step(i)
        rows = [("back to back", 0.0)] + [(f"after {g:g} ms idle", g / 1000) for g in opts.gaps_ms]
        first = opts.requests
        print(f"{'':22s} {'request path':>14s} {'reference loop':>15s}   (thread CPU µs each)")
        hot = ref_hot = 0.0
        for label, gap in rows:
            cost = per_request_us(step, opts.requests, gap, first)
            ref = per_request_us(lambda _: reference_work(), opts.requests, gap, 0)
            first += opts.requests
            if not gap:
                hot, ref_hot = cost, ref
            print(f"{label:22s} {cost:9.0f} {cost / hot:4.1f}x {ref:10.0f} {ref / ref_hot:4.1f}x")
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
