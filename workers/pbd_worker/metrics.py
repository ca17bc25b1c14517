"""The worker's side of custom metrics: updates are buffered here and ride ahead of the next
frame the worker sends (a result, a heartbeat), so ``increment()`` costs no round trip.

Consecutive updates of one metric are folded into one op (increments add up, a ``set`` absorbs
the increments after it, observations are appended). Only creating a family (which the daemon
may refuse) and reading a value wait for the daemon; both first send what is buffered, so the
daemon answers after applying everything the model did before.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from pbd_wire import worker_pb2 as wpb

# Buffered ops (or observations) beyond which the buffer is sent at once, without waiting for
# the next result or heartbeat: bounds the memory a model that observes in a tight loop uses.
MAX_PENDING = 4096


class MetricsChannel:
    def __init__(
        self,
        flush: Callable[[], None],
        ask: Callable[[wpb.MetricUpdates], wpb.MetricReply],
    ) -> None:
        """``flush()`` sends what is buffered now; ``ask(updates)`` sends a query (after what is
        buffered) and returns the daemon's reply."""
        self._flush = flush
        self._ask = ask
        self._lock = threading.Lock()
        self._ops: list[list[Any]] = []
        self._last: dict[int, list[Any]] = {}  # metric id -> its foldable pending op
        self._pending = 0
        self._ids = itertools.count(1)
        self._queries = itertools.count(1)

    def new_id(self) -> int:
        return next(self._ids)

    # -- buffered ---------------------------------------------------------------------------
    # Pending ops are plain lists [kind, id, payload] (protobuf field access costs more than
    # the update itself); take() builds the message.

    def _post(self, entry: list[Any], foldable: bool = False) -> None:
        with self._lock:
            self._ops.append(entry)
            if foldable:
                self._last[entry[1]] = entry
            self._pending += 1
            full = self._pending >= MAX_PENDING
        if full:
            self._flush()

    def metric_new(
        self, metric: int, family: int, labels: dict[str, str], buckets: list[float]
    ) -> None:
        self._post(["new", metric, (family, labels, buckets)])

    def increment(self, metric: int, value: float) -> None:
        with self._lock:
            entry = self._last.get(metric)
            if entry is not None and entry[0] != "observe":
                entry[2] += value  # an increment adds up; after a set, set(v + d)
                return
        self._post(["increment", metric, value], foldable=True)

    def set(self, metric: int, value: float) -> None:
        with self._lock:
            entry = self._last.get(metric)
            if entry is not None and entry[0] != "observe":
                entry[0], entry[2] = "set", value
                return
        self._post(["set", metric, value], foldable=True)

    def observe(self, metric: int, value: float) -> None:
        with self._lock:
            entry = self._last.get(metric)
            if entry is not None and entry[0] == "observe":
                entry[2].append(value)
                self._pending += 1
                if self._pending < MAX_PENDING:
                    return
                full = True
            else:
                full = False
        if full:
            self._flush()
        else:
            self._post(["observe", metric, [value]], foldable=True)

    def remove(self, metric: int) -> None:
        self._post(["remove", metric, None])
        with self._lock:
            self._last.pop(metric, None)

    def family_remove(self, family: int) -> None:
        self._post(["family_remove", family, None])

    def take(self) -> wpb.MetricUpdates | None:
        """Everything buffered, as one message (None if nothing is); the caller sends it."""
        if not self._ops:  # nearly always, once per frame sent: no lock to see it
            return None
        with self._lock:
            if not self._ops:
                return None
            entries, self._ops = self._ops, []
            self._last.clear()
            self._pending = 0
        updates = wpb.MetricUpdates()
        for kind, ident, payload in entries:
            op = updates.ops.add(id=ident)
            if kind == "increment":
                op.increment = payload
            elif kind == "set":
                op.set = payload
            elif kind == "observe":
                op.observe.values.extend(payload)
            elif kind == "new":
                family, labels, buckets = payload
                op.metric_new.family = family
                op.metric_new.labels.update(labels)
                op.metric_new.buckets.extend(buckets)
            elif kind == "remove":
                op.remove = True
            else:
                op.family_remove = True
        return updates

    # -- answered -----------------------------------------------------------------------------

    def family_new(self, family: int, name: str, description: str, kind: str) -> wpb.Error | None:
        """Register a family; the daemon's error if it refuses (a name taken by another kind)."""
        op = wpb.MetricOp(
            id=family, family_new=wpb.MetricFamilyNew(name=name, description=description, kind=kind)
        )
        reply = self._ask(wpb.MetricUpdates(ops=[op], query=next(self._queries)))
        return reply.error if reply.HasField("error") else None

    def value(self, metric: int) -> float:
        reply = self._ask(wpb.MetricUpdates(query=next(self._queries), value_of=metric))
        if reply.HasField("error"):
            raise RuntimeError(reply.error.message)
        return reply.value
