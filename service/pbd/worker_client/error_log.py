"""Failed batches in the daemon's log: one ERROR line per failed batch, rate-limited.

Triton logs each failed execution once, naming the model instance and the message. A model
that fails every request under load would flood journald that way, so each instance has a
token bucket: ``BURST`` lines at once, then ``RATE_PER_S`` lines a second; what the bucket
refuses is counted and reported as "N similar errors suppressed" with the next line logged.
The model's full traceback (pbd's own frames included) follows the message in the same record;
the client sees only the model's frames.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pbd_wire import worker_pb2 as wpb

log = logging.getLogger("pbd.instances")

BURST = 5.0
RATE_PER_S = 1.0
# Errors a request is answered with that are no model failure: not logged.
_QUIET_CODES = frozenset({"CANCELLED"})


@dataclass
class ErrorBucket:
    """One instance's budget of ERROR lines."""

    tokens: float = BURST
    updated: float = field(default_factory=time.monotonic)
    suppressed: int = 0

    def take(self, now: float) -> bool:
        self.tokens = min(BURST, self.tokens + (now - self.updated) * RATE_PER_S)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.suppressed += 1
        return False


def log_failed_batch(bucket: ErrorBucket, where: str, error: wpb.Error) -> None:
    """Log one failed batch of the instance ``where`` describes, if its bucket allows."""
    if error.code in _QUIET_CODES or not bucket.take(time.monotonic()):
        return
    suppressed, bucket.suppressed = bucket.suppressed, 0
    note = f" ({suppressed} similar errors suppressed)" if suppressed else ""
    detail = f"\n{error.traceback.rstrip()}" if error.traceback else ""
    log.error("%s: execute failed: %s%s%s", where, error.message, note, detail)
