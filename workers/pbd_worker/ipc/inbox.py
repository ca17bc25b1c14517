"""A thread that reads the daemon's frames while the main thread runs the model.

Without it nothing is read while ``execute()`` runs, so a cancellation would arrive only after
the model finished. The thread handles ``CancelRequests`` itself (it only sets flags), notes
each Execute's requests as pending (so a cancel that overtakes the main thread still counts),
and queues everything else for the main thread in arrival order. One Inbox per connection; it
ends at EOF (the main loop then sees ``None``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from pbd_wire import worker_pb2 as wpb
from pbd_worker.ipc.daemon_link import DaemonLink

log = logging.getLogger("pbd_worker")


class Inbox:
    def __init__(
        self,
        link: DaemonLink,
        on_cancel: Callable[[list[int]], None],
        on_execute: Callable[[wpb.Execute], None],
    ) -> None:
        self.link = link
        self.on_cancel = on_cancel
        self.on_execute = on_execute
        self._queue: queue.SimpleQueue[wpb.DaemonToWorker | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="daemon-reader", daemon=True)

    def start(self) -> Inbox:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while True:
                message = self.link.next()
                if message is None:
                    break
                kind = message.WhichOneof("kind")
                if kind == "cancel":
                    self.on_cancel(list(message.cancel.request_ids))
                    continue
                if kind == "execute":
                    self.on_execute(message.execute)
                self._queue.put(message)
        except (OSError, ValueError):
            pass  # the connection broke (or was closed under us): same as EOF
        except Exception:  # a malformed frame: the connection cannot be trusted any more
            log.exception("reading from the daemon failed; dropping the connection")
        finally:
            self._queue.put(None)

    def next(self) -> wpb.DaemonToWorker | None:
        """The next frame for the main loop; None once the connection ended."""
        return self._queue.get()
