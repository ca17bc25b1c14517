"""The ``--max-queued-bytes`` budget: input bytes of accepted, unanswered requests.

Two bounds, both checked before a request is queued:

- all models together hold at most ``limit`` bytes;
- one model holds at most :data:`MODEL_SHARE` of it, so a flood of one model's large requests
  leaves room for every other model's requests instead of refusing them.

A request is admitted whatever its size while nothing is held (in total, or by its model for
the share): a single request larger than the budget is served alone, not refused forever.

After a flood, the memory the flood's messages took goes back to the system: glibc keeps
freed heap (pbd raises its trim threshold for speed, see :mod:`pbd.memory.malloc`), so every
request (admitted or refused) is counted for :class:`pbd.memory.malloc.FloodTrim`, which trims
the heap once nothing is held and nothing came for a while.
"""

from __future__ import annotations

from collections import defaultdict

from pbd.errors import Code, PbdError
from pbd.memory.malloc import FloodTrim

MIB = 1024 * 1024
MODEL_SHARE = 0.75


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: unbounded
        self.held = 0
        self.by_model: defaultdict[str, int] = defaultdict(int)
        self.flood = FloodTrim(lambda: self.held > 0)

    def take(self, model: str, nbytes: int) -> None:
        """Count ``nbytes`` for ``model``, or raise RESOURCE_EXHAUSTED saying which bound."""
        limit, mine = self.limit, self.by_model[model]
        self.flood.came(nbytes)
        if limit and self.held and self.held + nbytes > limit:
            raise PbdError(
                Code.RESOURCE_EXHAUSTED,
                f"request for model '{model}' refused: the daemon already holds {self.held} "
                f"bytes of request inputs and this request adds {nbytes}, over the limit of "
                f"{limit} bytes (--max-queued-bytes)",
            )
        share = int(limit * MODEL_SHARE)
        if limit and mine and mine + nbytes > share:
            raise PbdError(
                Code.RESOURCE_EXHAUSTED,
                f"request for model '{model}' refused: the model already holds {mine} bytes of "
                f"request inputs and this request adds {nbytes}, over its share of {share} "
                f"bytes ({MODEL_SHARE:.0%} of --max-queued-bytes, the rest stays for other "
                "models)",
            )
        self.held += nbytes
        self.by_model[model] = mine + nbytes

    def give(self, model: str, nbytes: int) -> None:
        self.held -= nbytes
        left = self.by_model[model] - nbytes
        if left:
            self.by_model[model] = left
        else:
            del self.by_model[model]
