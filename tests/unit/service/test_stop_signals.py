"""pbd.stop_signals: SIGTERM reaches the loop while serving, and never kills after the stop."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A process with idle threads (the daemon has several) that serves and stops 200 times while a
# second process sends it SIGTERM every ~50 µs. It must never die of the signal: each SIGTERM
# either reaches on_stop or is ignored. With the loop's own add/remove_signal_handler, removing
# the handler sets SIG_DFL for a moment, and this process died in it.
_TARGET = textwrap.dedent(
    """
    import asyncio, os, signal, subprocess, sys, threading
    from pbd.stop_signals import stop_signals

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # before the first block, as at start-up
    quiet = threading.Event()
    for _ in range(3):
        threading.Thread(target=quiet.wait, daemon=True).start()
    hammer = subprocess.Popen([sys.executable, "-c", '''
    import os, signal, sys, time
    pid = int(sys.argv[1]); end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.00005)
    ''', str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def main() -> int:
        seen = []
        for _ in range(200):
            with stop_signals(lambda: seen.append(1)):
                await asyncio.sleep(0.001)
        return len(seen)

    try:
        handled = asyncio.run(main())
    finally:
        hammer.kill()
        hammer.wait()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert handled > 0, "no SIGTERM reached on_stop"
    print("survived", handled)
    """
)


def test_sigterm_after_the_stop_never_kills() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _TARGET], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "survived" in done.stdout


_PROMPT = textwrap.dedent(
    """
    import asyncio, os, signal
    from pbd.stop_signals import stop_signals

    async def main() -> None:
        stopped = asyncio.get_running_loop().create_future()
        with stop_signals(lambda: stopped.done() or stopped.set_result(None)):
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.wait_for(stopped, 10)
        os.kill(os.getpid(), signal.SIGTERM)  # ignored now
        print("stopped once, then ignored")

    asyncio.run(main())
    """
)


def test_signal_reaches_the_loop_then_is_ignored() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROMPT], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "stopped once, then ignored" in done.stdout
