"""systemd's service notification protocol (sd_notify), for the daemon and the workers.

Under a unit with ``Type=notify`` systemd sets ``NOTIFY_SOCKET``; without it every call here
is a no-op, so the same code runs under the process launcher, in a terminal and in tests.
``WATCHDOG_USEC`` (set when the unit has ``WatchdogSec=``) gives the interval at which
``WATCHDOG=1`` must arrive; we send at half of it.
"""

from __future__ import annotations

import os
import threading

import sdnotify


class Notifier:
    def __init__(self) -> None:
        env = os.environ  # sdnotify reads NOTIFY_SOCKET from here too
        self.enabled = bool(env.get("NOTIFY_SOCKET"))
        # sdnotify opens its socket at construction; only build it when there is one to open.
        self._notifier = sdnotify.SystemdNotifier() if self.enabled else None
        self._lock = threading.Lock()
        self.watchdog_interval_s = 0.0
        usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
        if self.enabled and usec.isdigit() and int(usec) > 0 and pid in ("", str(os.getpid())):
            self.watchdog_interval_s = int(usec) / 2e6

    def send(self, *assignments: str) -> None:
        """One datagram of ``KEY=value`` lines, e.g. ``send("READY=1", "STATUS=serving")``."""
        if self._notifier is None:
            return
        # STATUS= is one line: a newline would start a new assignment.
        text = "\n".join(a.replace("\n", " ") for a in assignments)
        with self._lock:
            self._notifier.notify(text)

    def ready(self, status: str = "") -> None:
        self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self, status: str = "") -> None:
        self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._notifier is not None and self._notifier.socket is not None:
            self._notifier.socket.close()
            self._notifier.socket = None
