"""bench.cache's own logic, without servers: its cases and its speed-up table."""

from __future__ import annotations

from bench.cache import CACHED, EXECUTED, cases, speedups, triton_cache_dir
from bench.loadgen import summarize
from bench.report import ScenarioResult
from bench.vs_triton import SERVERS


def test_each_shape_and_concurrency_runs_executed_then_cached() -> None:
    listed = [(model, s.name, s.concurrency) for model, s in cases()]
    assert listed[:2] == [
        (EXECUTED, "fp32 [1,16] executed", 1),
        (CACHED, "fp32 [1,16] cache hit", 1),
    ]
    assert len(listed) == 8 and {s.shape[1] for _, s in cases()} == {16, 262144}


def test_the_table_gives_each_servers_speed_up_and_pbd_over_triton() -> None:
    results = []
    for model, scenario in cases():
        result = ScenarioResult(scenario, servers=SERVERS)
        for server, rate in (("triton", 100), ("pbd", 150 if model == CACHED else 50)):
            result.runs[server].append(summarize([0.001] * rate, window_s=1.0))
        results.append((model, result))
    table = speedups(results).splitlines()
    assert len(table) == 2 + 4
    assert table[2] == "| fp32 [1,16] | 1 | 100 | 100 | 1.00 | 50 | 150 | 3.00 | 1.50 |"


def test_tritons_cache_libraries_are_beside_its_launcher() -> None:
    found = triton_cache_dir("/x/.triton/tritonserver")
    assert str(found) == "/x/.triton/pytriton/tritonserver/caches"
