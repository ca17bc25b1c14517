"""The ``--max-queued-bytes`` budget: input bytes of accepted, unanswered requests.

Two bounds, both checked before a request is queued:

- all models together hold at most ``limit`` bytes;
- one model holds at most :data:`MODEL_SHARE` of it, so a flood of one model's large requests
  leaves room for every other model's requests instead of refusing them.

A request is admitted whatever its size while nothing is held (in total, or by its model for
the share): a single request larger than the budget is served alone, not refused forever.

After a flood, the memory the flood's messages took goes back to the system: glibc keeps
freed heap (pbd raises its trim threshold for speed, see :mod:`pbd.memory.malloc`), so once
:data:`TRIM_AFTER_BYTES` of requests (admitted or refused) came in and then nothing was
admitted for :data:`TRIM_IDLE_S`, the heap is trimmed, off the event loop, and once more
:data:`TRIM_AGAIN_S` later if still idle (gRPC frees some of a flood's buffers only after its
calls have ended). A busy server is never trimmed: the heap it keeps is what makes large
requests fast.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from pbd.errors import Code, PbdError
from pbd.memory.malloc import trim_heap

MIB = 1024 * 1024
MODEL_SHARE = 0.75
TRIM_AFTER_BYTES = 32 * MIB
TRIM_IDLE_S = 1.0
TRIM_AGAIN_S = 5.0


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: unbounded
        self.held = 0
        self.by_model: defaultdict[str, int] = defaultdict(int)
        self._received = 0  # bytes asked for since the heap was last trimmed
        self._admitted = 0  # requests admitted, so a pending trim sees whether any came
        self._trim: asyncio.TimerHandle | None = None

    def take(self, model: str, nbytes: int) -> None:
        """Count ``nbytes`` for ``model``, or raise RESOURCE_EXHAUSTED saying which bound."""
        limit, mine = self.limit, self.by_model[model]
        self._received += nbytes
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
        self._admitted += 1

    def give(self, model: str, nbytes: int) -> None:
        self.held -= nbytes
        left = self.by_model[model] - nbytes
        if left:
            self.by_model[model] = left
        else:
            del self.by_model[model]
        if self.held == 0 and self._received >= TRIM_AFTER_BYTES and self._trim is None:
            loop = asyncio.get_running_loop()
            self._trim = loop.call_later(TRIM_IDLE_S, self._trim_if_idle, self._admitted)

    def _trim_if_idle(self, admitted: int, again: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._trim = None
        if self.held or self._admitted != admitted:  # busy again: look again later
            self._trim = loop.call_later(TRIM_IDLE_S, self._trim_if_idle, self._admitted)
            return
        self._received = 0
        loop.run_in_executor(None, trim_heap)
        if again:
            self._trim = loop.call_later(TRIM_AGAIN_S, self._trim_if_idle, admitted, False)
