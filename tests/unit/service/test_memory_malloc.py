from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from pbd.memory import malloc
from pbd.memory.malloc import MIB, TUNING, FloodTrim, describe


def test_glibc_accepts_every_setting():
    # In a child process: the settings are process-wide and should not leak into pytest's.
    code = "from pbd.memory.malloc import tune_malloc; r = tune_malloc(); print(sorted(r.items()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sorted((k, True) for k in TUNING))


def test_describe_names_every_setting():
    text = describe()
    assert all(name in text for name in TUNING) and "M_ARENA_MAX=2" in text


# Six 1 MiB buffers at once, freed, 50 times: large requests' transient buffers (bodies,
# a copy, the reply). The page faults of the loop, in a child (the settings are process-wide).
CHURN = """
import resource, sys
from pbd.memory.malloc import tune_malloc
if sys.argv[1] == "tuned":
    tune_malloc()
for _ in range(3):  # glibc's own thresholds adapt to these sizes first
    held = [bytearray(1 << 20) for _ in range(6)]
    del held
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    held = [bytearray(1 << 20) for _ in range(6)]
    del held
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_tuned_the_heap_keeps_large_freed_buffers_and_glibc_alone_does_not() -> None:
    # glibc's own thresholds trim the heap after a round and fault it in again for the next
    # (10,528 faults here: 210 a round, of 1,536 pages); tuned, the heap keeps the buffers.
    assert _faults("untuned") > 50 * 40
    assert _faults("tuned") < 256


def _flood_run(busy: list[bool], steps: list[tuple[float, int]], wait: float) -> None:
    """Requests of ``steps`` (a pause, then a request of that many bytes), then ``wait``."""

    async def run() -> None:
        flood = FloodTrim(lambda: busy[0])
        for pause, nbytes in steps:
            await asyncio.sleep(pause)
            flood.came(nbytes)
        await asyncio.sleep(wait)
        flood.close()

    asyncio.run(run())


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    trims: list[str] = []
    monkeypatch.setattr(malloc, "trim_heap", lambda: trims.append("trim"))
    monkeypatch.setattr(malloc, "TRIM_IDLE_S", 0.01)
    monkeypatch.setattr(malloc, "TRIM_AGAIN_S", 0.05)
    return trims


def test_a_flood_is_trimmed_once_idle_and_once_more_later(fast: list[str]) -> None:
    _flood_run([False], [(0, 40 * MIB)], wait=0.2)
    assert fast == ["trim", "trim"]


def test_less_than_a_flood_is_not_trimmed(fast: list[str]) -> None:
    _flood_run([False], [(0, 4 * MIB)] * 7, wait=0.1)
    assert fast == []


def test_a_busy_process_is_not_trimmed_until_it_is_idle(fast: list[str]) -> None:
    busy = [True]

    async def run() -> None:
        flood = FloodTrim(lambda: busy[0])
        flood.came(40 * MIB)
        await asyncio.sleep(0.05)
        assert fast == []  # held: looked again and again, nothing trimmed
        for _ in range(5):  # requests keep coming: not idle either
            flood.came(1)
            await asyncio.sleep(0.005)
        busy[0] = False
        await asyncio.sleep(0.03)
        assert fast == ["trim"]
        flood.close()

    asyncio.run(run())
