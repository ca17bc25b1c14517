"""What tracing costs a request while it is off: the calls the request path makes for it,
timed alone, against the daemon's whole CPU per request.

    python -m bench.tracing_off [--daemon-us 400]

With tracing off (the default: no exporter) a ModelInfer meets tracing three ways: the edge
asks ``DataPlane.start_trace`` whether to trace (``Tracing.sample``: no exporter, no), it
runs through ``answer_request`` with no trace, and the path checks ``request.trace is not
None`` (six on a unary request's path). Each is timed here with ``timeit`` on the real
functions, and the sum is set against ``--daemon-us``, the daemon's CPU per small request
(``python -m bench.cpu_split`` measures it). A build with no tracing code on the path would
save that sum and nothing else: the untraced path allocates nothing for tracing and sends
nothing to the worker for it.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from types import SimpleNamespace

from pbd.answer import answer_request
from pbd.dataplane import DataPlane
from pbd.grpc.status import finishing
from pbd.tracing.provider import Tracing
from pbd.tracing.settings import TraceSettings
from pbd.types import InferRequest

# `... trace is not None` on a unary request's path: version (1), dispatch (1), instance (1),
# messages (2), and one spare for the edge.
CHECKS_PER_REQUEST = 6


class _Result:
    answered = False  # as an InferResult no edge answered early

    def __enter__(self) -> _Result:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


RESULT = _Result()


async def _infer(request: InferRequest) -> _Result:
    return RESULT


def _encode(result: _Result) -> bytes:
    return b""


async def _plain(request: InferRequest) -> bytes:
    with await _infer(request) as result:
        return _encode(result)


def _drive(coroutine: object) -> None:
    try:
        coroutine.send(None)  # type: ignore[attr-defined]
    except StopIteration:
        pass


def _ns(statement: object, number: int) -> float:
    best = min(timeit.repeat(statement, number=number, repeat=5))  # type: ignore[arg-type]
    return best / number * 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_off", description=__doc__)
    parser.add_argument("--daemon-us", type=float, default=400.0,
                        help="the daemon's CPU per small request, for the share")  # fmt: skip
    opts = parser.parse_args(argv)
    request = InferRequest(model_name="m", model_version="", id="", inputs=[])
    plane = SimpleNamespace(tracing=Tracing(TraceSettings()))
    number = 200_000

    def start() -> None:
        DataPlane.start_trace(plane, request, "ModelInfer", 0, lambda: None)  # type: ignore[arg-type]

    def traced() -> None:
        _drive(answer_request(request, None, _infer, _encode, finishing))

    def plain() -> None:
        _drive(_plain(request))

    def check() -> None:
        request.trace is not None  # noqa: B015 - the check itself is what is timed

    start_ns = _ns(start, number)
    wrapper_ns = max(0.0, _ns(traced, number) - _ns(plain, number))
    checks_ns = _ns(check, number) * CHECKS_PER_REQUEST
    total_ns = start_ns + wrapper_ns + checks_ns
    print(f"start_trace (off)           {start_ns:7.0f} ns")
    print(f"answer_request (no trace)   {wrapper_ns:7.0f} ns")
    print(f"{CHECKS_PER_REQUEST} trace checks               {checks_ns:7.0f} ns")
    share = total_ns / (opts.daemon_us * 1e3) * 100
    print(f"tracing off, per request    {total_ns:7.0f} ns = {share:.2f}% of {opts.daemon_us:g} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
