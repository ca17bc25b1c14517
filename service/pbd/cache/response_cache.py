"""The response cache on the request path (``DataPlane.infer``), with Triton's statistics.

A request of a model whose config says ``response_cache { enable: true }`` is looked up first;
a hit is answered from the cache without reaching the model's queue (the model's statistics
count a success, a queue entry and a cache hit; no inference, no execution). A miss runs as
usual; its successful result is copied into the cache before it is answered (a failure is not
cached), and the lookup and insertion count as its cache miss. A request that has no key
(``pbd.cache.key``) is neither: it just runs.

Cache-wide counters (entries, lookups, hits, misses, evictions, durations) are what Triton's
``nv_cache_*`` metrics report.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from pbd.cache.entry import CachedResponse
from pbd.cache.key import request_key
from pbd.cache.store import LruStore
from pbd.stats import ModelStats
from pbd.types import InferResult, PreparedRequest


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class CachedModel(Protocol):
    """What the cache needs of a model version (a VersionRuntime, an ensemble's included)."""

    @property
    def config(self) -> _Named: ...
    @property
    def version(self) -> int: ...
    @property
    def stats(self) -> ModelStats: ...
    @property
    def serving(self) -> bool: ...

    async def infer(self, prepared: PreparedRequest) -> InferResult: ...


class ResponseCache:
    def __init__(self, size_bytes: int) -> None:
        self.store: LruStore[CachedResponse] = LruStore(size_bytes)
        self.lookups = 0
        self.hits = 0
        self.misses = 0
        self.lookup_ns = 0
        self.insertion_ns = 0
        # Each loaded model version gets a number of its own: a model unloaded and loaded
        # again (new code, same version) never answers with what the old one computed.
        self._generations: weakref.WeakKeyDictionary[CachedModel, int] = weakref.WeakKeyDictionary()
        self._next = itertools.count(1)

    @property
    def utilization(self) -> float:
        return self.store.used / self.store.capacity

    def _generation(self, model: CachedModel) -> int:
        generation = self._generations.get(model)
        if generation is None:
            generation = self._generations[model] = next(self._next)
        return generation

    async def infer(self, model: CachedModel, prepared: PreparedRequest) -> InferResult:
        """``prepared`` answered from the cache, or run by ``model`` and cached."""
        began = time.perf_counter_ns()
        if not model.serving:
            return await model.infer(prepared)  # which says why it cannot run
        key = request_key(prepared, model.config.name, model.version, self._generation(model))
        if key is None:
            return await model.infer(prepared)
        found = self.store.get(key)
        looked = time.perf_counter_ns()
        self.lookups += 1
        self.lookup_ns += looked - began
        request = prepared.request
        if found is not None:
            self.hits += 1
            result = found.result(request, model.config.name, str(model.version))
            done = time.perf_counter_ns()
            model.stats.answered_from_cache(done - began, 0, done - began)
            return result
        self.misses += 1
        insert = _Insertion(self, key)
        respond = request.respond
        if respond is not None:  # answered where the result is read: cached just before
            request.respond = insert.then(respond)
        result = await model.infer(prepared)
        insert(result)
        model.stats.missed_cache(looked - began + insert.ns)
        return result


class _Insertion:
    """Puts one request's result into the cache, once (before an early answer releases its
    memory, or after the request returns)."""

    def __init__(self, cache: ResponseCache, key: bytes) -> None:
        self.cache = cache
        self.key = key
        self.ns = 0
        self.done = False

    def __call__(self, result: InferResult) -> None:
        if self.done or result.answered:
            return
        self.done = True
        began = time.perf_counter_ns()
        entry = CachedResponse.of(result)
        self.cache.store.put(self.key, entry, entry.nbytes)
        self.ns = time.perf_counter_ns() - began
        self.cache.insertion_ns += self.ns

    def then(self, respond: Callable[[InferResult], None]) -> Callable[[InferResult], None]:
        def insert_and_respond(result: InferResult) -> None:
            self(result)
            respond(result)

        return insert_and_respond
