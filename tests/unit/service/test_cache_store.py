"""The byte-bounded LRU store under the response cache."""

from __future__ import annotations

import pytest

from pbd.cache.store import LruStore


def test_a_value_put_is_got_back_and_counts_its_bytes() -> None:
    store: LruStore[str] = LruStore(100)
    assert store.put(b"a", "A", 40)
    assert store.get(b"a") == "A" and store.get(b"b") is None
    assert (len(store), store.used) == (1, 40)


def test_the_least_recently_used_values_leave_until_a_new_one_fits() -> None:
    store: LruStore[str] = LruStore(100)
    for key in (b"a", b"b", b"c"):
        store.put(key, key.decode(), 30)
    store.get(b"a")  # now b is the least recently used
    assert store.put(b"d", "d", 50)
    assert [k for k in (b"a", b"b", b"c", b"d") if k in store] == [b"a", b"d"]
    assert (store.used, store.evictions) == (80, 2)


def test_a_value_bigger_than_the_store_is_refused_and_evicts_nothing() -> None:
    store: LruStore[str] = LruStore(100)
    store.put(b"a", "a", 60)
    assert not store.put(b"big", "big", 101)
    assert b"a" in store and b"big" not in store and store.evictions == 0


def test_a_key_already_held_keeps_its_value() -> None:
    store: LruStore[str] = LruStore(100)
    store.put(b"a", "first", 10)
    assert not store.put(b"a", "second", 10)
    assert store.get(b"a") == "first" and store.used == 10


def test_a_store_needs_room() -> None:
    with pytest.raises(ValueError, match="positive capacity"):
        LruStore(0)
