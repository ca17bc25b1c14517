"""Who waits on whom among BLS calls, and the calls that could never run.

An instance that made a BLS call is blocked in ``execute()`` until the call is answered. A call
is either *hosted* (its request is executing on a known instance: that instance made a BLS call
naming it as a parent) or waiting for any instance of its model (queued, or executing on an
instance that has made no call yet, which is therefore making progress).

The stuck instances are the greatest set S of blocked instances such that each has a call that
cannot progress given S: a hosted call progresses when its host is not in S, any other call
when its model has an instance outside S. A call that is not hosted, whose caller is stuck and
whose model has every instance in S, can never be taken: every instance that could run it waits,
directly or through other calls, on it. Such calls are refused, newest first, one at a time
(refusing one unblocks its caller, which may free the others). That covers a model calling
itself with one instance, A -> B -> A cycles, and every instance of a model waiting on calls to
that same model. Requests from clients never block an instance, so they never take part.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from pbd.errors import Code, PbdError

DEADLOCK_MESSAGE = (
    "BLS request to model '{model}' can never run: every instance of '{model}' is busy in "
    "execute(), waiting (directly or through other BLS requests) for this request; give "
    "'{model}' more instances (instance_group count) or break the cycle of BLS calls"
)


@dataclass(eq=False)
class Waiter:
    gid: int
    caller: Hashable
    model: str
    refused: asyncio.Future[PbdError]
    host: Hashable | None = None


class WaitGraph:
    def __init__(self, instances_of: Callable[[str], Sequence[Hashable]]) -> None:
        self.instances_of = instances_of
        self.calls: dict[int, Waiter] = {}
        self._gids = itertools.count(1)

    def add_call(self, caller: Hashable, model: str, parents: Sequence[int]) -> Waiter:
        """Register a call ``caller`` made while executing the BLS requests ``parents``."""
        waiter = Waiter(next(self._gids), caller, model, asyncio.get_running_loop().create_future())
        self.calls[waiter.gid] = waiter
        for parent in parents:
            hosted = self.calls.get(parent)
            if hosted is not None:
                hosted.host = caller
        return waiter

    def remove_call(self, waiter: Waiter) -> None:
        self.calls.pop(waiter.gid, None)

    def forget_instance(self, instance: Hashable) -> None:
        for waiter in self.calls.values():
            if waiter.host is instance:
                waiter.host = None

    def stuck(self) -> set[Hashable]:
        """The blocked instances that can never go on (the greatest fixpoint above)."""
        waits: dict[Hashable, list[Waiter]] = {}
        for waiter in self.calls.values():
            if not waiter.refused.done():
                waits.setdefault(waiter.caller, []).append(waiter)
        stuck = set(waits)
        changed = True
        while changed:
            changed = False
            for instance in list(stuck):
                if all(self._progresses(w, stuck) for w in waits[instance]):
                    stuck.discard(instance)
                    changed = True
        return stuck

    def _progresses(self, waiter: Waiter, stuck: set[Hashable]) -> bool:
        if waiter.host is not None:
            return waiter.host not in stuck
        instances = self.instances_of(waiter.model)
        # No instance at all is not a deadlock: the model is loading, unloading or gone.
        return not instances or any(i not in stuck for i in instances)

    def check(self) -> None:
        """Refuse the calls that can never run (see the module text)."""
        while True:
            stuck = self.stuck()
            doomed = [
                w
                for w in self.calls.values()
                if not w.refused.done()
                and w.caller in stuck
                and w.host is None
                and not self._progresses(w, stuck)
            ]
            if not doomed:
                return
            newest = max(doomed, key=lambda w: w.gid)
            newest.refused.set_result(
                PbdError(Code.UNAVAILABLE, DEADLOCK_MESSAGE.format(model=newest.model))
            )
