"""A keyed store bounded by bytes, least recently used out first.

Knows nothing of requests: a value and its size go in under a key. A value bigger than the
whole store is refused (Triton's local cache refuses it too); otherwise the least recently used
values leave until it fits.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LruStore(Generic[V]):
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a store needs a positive capacity, got {capacity}")
        self.capacity = capacity
        self.used = 0
        self.evictions = 0
        self._values: OrderedDict[bytes, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: bytes) -> bool:
        return key in self._values

    def get(self, key: bytes) -> V | None:
        """The value under ``key`` (now the most recently used), or None."""
        found = self._values.get(key)
        if found is None:
            return None
        self._values.move_to_end(key)
        return found[0]

    def put(self, key: bytes, value: V, nbytes: int) -> bool:
        """Keep ``value`` under ``key``; False when it is bigger than the store or the key is
        taken already (the value there stays: the same request answered the same way)."""
        if nbytes > self.capacity or key in self._values:
            return False
        while self.used + nbytes > self.capacity:
            _, (_, size) = self._values.popitem(last=False)
            self.used -= size
            self.evictions += 1
        self._values[key] = (value, nbytes)
        self.used += nbytes
        return True
