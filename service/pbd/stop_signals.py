"""SIGTERM and SIGINT handed to a process's event loop while it serves, ignored once it stops.

Not ``loop.add_signal_handler``: removing such a handler (``remove_signal_handler``, or
closing the loop) puts back the default action, which for SIGTERM is to die. A supervisor
that repeats its SIGTERM while the process winds down (systemd does, so does a test harness)
then turns a clean exit into "killed by signal 15" — in a process with threads, blocking the
signal in the main thread does not close that moment, since another thread takes it. Here the
handler is replaced by SIG_IGN in one step, and the loop never knew of it.

The handler runs in the main thread (Python runs signal handlers there); the wake-up byte
the C-level handler writes brings the loop out of its wait so that happens at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """``on_stop`` called on the running loop for each SIGTERM/SIGINT until the block ends;
    from then on the process ignores them. Call from the main thread, inside the loop."""
    loop = asyncio.get_running_loop()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    loop.add_reader(reader.fileno(), _drain, reader)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def handle(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(on_stop)

    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, handle)
        yield
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        signal.set_wakeup_fd(previous)
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()


def _drain(reader: socket.socket) -> None:
    """The wake-up bytes (a signal number each) have done their work once read."""
    with contextlib.suppress(BlockingIOError):
        while reader.recv(4096):
            pass
