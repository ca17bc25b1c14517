"""Dynamic batches formed in the worker, from the requests every front end sent it.

A front end sends each request of a dynamic-batching model straight to one of the model's
workers (the instance with the fewest of its requests in flight), as it does for a plain model:
the requests wait in the worker's links until the model is free, which is where Triton's
dynamic batcher would hold them. When the main loop takes one of them, ``FrontBatcher.gather``
takes every other request the links hold by then (reading what has arrived, without waiting
on the daemon) and keeps those that make a batch with it by Triton's rule
(``pbd_wire.batching.gather``: sizes within ``max_batch_size``, same shapes past the batch
dimension and same outputs, a ``preferred_batch_size`` reached, ``max_queue_delay_microseconds``
to wait for more). What does not join goes back to the head of its link's inbox, in order, for
the next batch; frames other than Executes met on the way (a Release, a CancelRequests) are
handled at once, in the order they came.

The batch runs as one ``execute()`` (``BatchExecutor.run_parts``); each front end still gets one
``ExecuteResult`` per request it sent, on its own link, marked ``merged`` (one of them counts
the execution in the statistics: ``batch_rows``). A decoupled model's batches form the same
way (an LLM that batches its requests); each request's responses go back on its own link as
its response sender sends them.

A queue bound (``max_queue_size``, per priority level) holds for the requests waiting here
behind the one the free model takes first, the batch about to form included (they wait in
Triton's queue until it goes): those past this instance's share of the bound
(``pbd_wire.batching.queue_share``: the bound over the version's instances), the last in
service order, are refused with Triton's words ("Exceeds maximum queue size"). Requests are read
between executes, so one that came while the model ran is refused when it is done, not the
moment it came; and the first of them counts as taken, not waiting, where Triton would have
queued it too (one more may wait than in Triton after a busy spell).

Which settings a worker honours alone is ``pbd_wire.batching.direct_batching``'s to say; a model
whose batching needs more keeps its requests on the daemon's path, and the daemon's own batches
(requests that went through it) run as it formed them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pbd_wire import worker_pb2 as wpb
from pbd_wire.batching import BatchingPolicy, gather, queue_full_message, queue_share
from pbd_worker.ipc.front_connections import FrontConnection, FrontConnections

# A front link's Execute frame, and the link.
Part = tuple[FrontConnection, wpb.DaemonToWorker]
Signature = tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[str, ...]]


def batch_key(execute: wpb.Execute) -> tuple[int, Signature]:
    """The batch dimension the Execute's requests add (the first dimension of each one's
    first input; a front end's Execute carries one request), and what two requests must share
    to run in one execute (``pbd.scheduling.dynamic_batcher``'s signature, read from the
    wire)."""
    total = 0
    inputs: list[tuple[str, str, tuple[int, ...]]] = []
    outputs: list[str] = []
    for request in execute.requests:
        refs = request.inputs[:]
        shape = refs[0].shape if refs else ()
        total += shape[0] if shape else 1
        inputs.extend([(i.name, i.datatype, tuple(i.shape[1:])) for i in refs])
        if request.requested_outputs:
            outputs.extend(request.requested_outputs)
    if len(inputs) > 1:
        inputs.sort()
    if len(outputs) > 1:
        outputs.sort()
    return total, (tuple(inputs), tuple(outputs))


# Triton's words for a request that waited in the queue past its timeout (REJECT).
TIMEOUT_EXPIRED = "Request timeout expired"


class FrontBatcher:
    """Gathers the front links' Executes of one dynamic-batching model into batches."""

    def __init__(
        self,
        policy: BatchingPolicy,
        fronts: FrontConnections,
        other: Callable[[wpb.DaemonToWorker, FrontConnection], None],
        reject: Callable[[FrontConnection, wpb.DaemonToWorker, str], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        name: str = "the model",
        instances: int = 1,
    ) -> None:
        """``name`` ("model 'm' version 1") for the message of a full queue; ``instances``:
        how many share the version's queue bound."""
        self.policy = policy
        self.name = name
        self.instances = instances
        self.fronts = fronts
        self._other = other  # handles a link's Release or CancelRequests met on the way
        self._reject = reject  # answers a request its queue refused, never run
        self._clock = clock
        # Served in an order of their own: by priority level, and past a timeout.
        levels = [policy.default_policy, *policy.level_policies.values()]
        self._ordered = bool(policy.levels) or any(
            level.default_timeout_us or level.allow_timeout_override for level in levels
        )
        # The delay and the timeouts count from when a request was read; without either, no
        # time is taken.
        fronts.arrived = {} if policy.max_delay_us or self._ordered else None
        self._bounded_levels = any(level.max_queue_size for level in levels)
        # Nothing but the size and the signature decides: a request alone is its own batch.
        self._plain = not (policy.max_delay_us or self._ordered or self._bounded_levels)

    def gather(self, link: FrontConnection, message: wpb.DaemonToWorker) -> list[Part]:
        """The batch to run now, ``message`` (an Execute just taken from ``link``) among the
        candidates: in arrival order, or by priority level and timeout when the policy has
        them (then the batch may not include ``message``, and is empty when every candidate
        was refused)."""
        policy = self.policy
        items: list[Part] = [(link, message)]
        self._take_arrived(items)
        if self._plain and len(items) == 1:
            return items
        keys: dict[int, tuple[int, Signature]] = {}  # id(message): its batch key, once

        def key(part: Part) -> tuple[int, Signature]:
            found = keys.get(id(part[1]))
            if found is None:
                found = keys[id(part[1])] = batch_key(part[1].execute)
            return found

        arrived = self.fronts.arrived
        while True:
            now = self._clock()
            if self._ordered:
                items = self._in_order(items, now)
            if self._bounded_levels:
                items = self._bounded(items)
            if not items:
                return []
            batch, closed, preferred = gather(
                items,
                lambda part: key(part)[0],
                lambda part: key(part)[1],
                policy.max_batch_size,
                policy.preferred,
            )
            if closed or not policy.max_delay_us:
                break
            if preferred is not None:
                batch = preferred
                break
            assert arrived is not None  # kept with a delay
            oldest = min(arrived.get(m.execute.batch_id, now) for _, m in batch)
            left = oldest + policy.max_delay_us / 1e6 - now
            if left <= 0:
                break
            self._take_arrived(items, left)
        self._put_back(items[len(batch) :])
        if arrived is not None:
            for _, taken in batch:
                arrived.pop(taken.execute.batch_id, None)
        return batch

    def _in_order(self, items: list[Part], now: float) -> list[Part]:
        """``items`` in the order they are served, as the daemon's queues serve them: level 1
        first; in a level, arrival order, then the ones whose timeout passed with
        ``timeout_action: DELAY``. One whose timeout passed with REJECT is refused here."""
        policy = self.policy
        arrived = self.fronts.arrived
        assert arrived is not None  # kept when ordered
        keyed: list[tuple[tuple[int, bool, int], Part]] = []
        for index, (link, message) in enumerate(items):
            execute = message.execute
            request = execute.requests[0] if execute.requests else None
            level = policy.level_of(request.priority if request is not None else 0)
            queue = policy.policy_of(level)
            timeout_us = queue.timeout_us(request.timeout_us if request is not None else 0)
            late = False
            if timeout_us and now - arrived.get(execute.batch_id, now) > timeout_us / 1e6:
                if not queue.delay_on_timeout:
                    arrived.pop(execute.batch_id, None)
                    self._reject(link, message, TIMEOUT_EXPIRED)
                    continue
                late = True
            keyed.append(((level, late, index), (link, message)))
        keyed.sort(key=lambda entry: entry[0])
        return [part for _, part in keyed]

    def _bounded(self, items: list[Part]) -> list[Part]:
        """``items`` (in service order): the first, which the free model takes now, and behind
        it those within each level's share of its ``max_queue_size``; the rest, the last in
        that order, refused."""
        policy = self.policy
        arrived = self.fronts.arrived
        counts: dict[int, int] = {}
        kept: list[Part] = items[:1]
        for link, message in items[1:]:
            requests = message.execute.requests
            level = policy.level_of(requests[0].priority if requests else 0)
            limit = policy.policy_of(level).max_queue_size
            share = queue_share(limit, self.instances)
            seen = counts[level] = counts.get(level, 0) + 1
            if share and seen > share:
                if arrived is not None:
                    arrived.pop(message.execute.batch_id, None)
                self._reject(link, message, queue_full_message(self.name, share, limit))
            else:
                kept.append((link, message))
        return kept

    def _take_arrived(self, items: list[Part], wait_s: float = 0.0) -> None:
        """Add the links' Executes that are here (waiting up to ``wait_s`` for one when none
        is) to ``items``; handle what else they sent."""
        fronts = self.fronts
        fronts.read_now(wait_s)
        while (taken := fronts.take()) is not None:
            link, message = taken
            if message.WhichOneof("kind") == "execute":
                if not link.closed:
                    items.append(taken)
            else:
                self._other(message, link)

    def _put_back(self, parts: list[Part]) -> None:
        by_link: dict[int, tuple[FrontConnection, list[wpb.DaemonToWorker]]] = {}
        for link, message in parts:
            by_link.setdefault(id(link), (link, []))[1].append(message)
        for link, messages in by_link.values():
            self.fronts.put_back(link, messages)
