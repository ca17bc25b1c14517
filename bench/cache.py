"""The response cache: a warm cache hit against an executed request, on pbd and on Triton 2.51,
same models, same load, same run.

    python -m bench.cache [--quick] [--repeat N] [--duration S] [--cache-bytes N]
                          [--pbd-arg=FLAG] [--triton-arg=FLAG] [--json PATH]

Both servers load ``identity_fp32_x2`` (an FP32 identity, two CPU instances, no cache) and
``identity_fp32_cached`` (the same model.py with ``response_cache { enable: true }``) from
bench/models, with a cache of ``--cache-bytes`` (pbd: ``--cache-local-size-bytes``; Triton:
``--cache-config local,size=N`` and its local cache library). "executed" sends the same request
to the first model, "cache hit" to the second: after the first answer (in the warm-up) every
request is a hit. Per case and repeat the servers take turns under bench/loadgen's closed loop;
medians over ``--repeat``. The table gives each server's rate and the hit's speed-up over its
executed request. See bench/README.md, "Response cache".

Exit code 0 when every answer checked was right, no call failed, every cached request but the
first of each shape was a hit and pbd stopped cleanly; 1 otherwise; 2 when a server did not
start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import tritonclient.grpc as grpcclient

from bench import procstat
from bench.loadgen import build_request
from bench.report import Scenario, ScenarioResult, format_row, table_head
from bench.run import add_common_args, check_common_args, common_header, measure_scenario
from bench.servers import ROOT, ServerProcess, kill_leftovers, leftover_segments, start_pbd
from bench.servers import start_triton as start_triton_server
from bench.vs_triton import SERVERS, add_triton_args, install_triton

EXECUTED, CACHED = "identity_fp32_x2", "identity_fp32_cached"
REPOSITORY = ROOT / "bench" / "models"
RESULTS = ROOT / "bench" / "results"
MIB = 262144  # FP32 elements in 1 MiB
SHAPES = {"fp32 [1,16]": [1, 16], "fp32 1 MiB": [1, MIB]}
CONCURRENCY = (1, 4)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cache",
        description="response cache hit against an executed request, pbd and Triton 2.51",
    )
    add_common_args(parser, RESULTS / "cache.json")
    add_triton_args(parser)
    parser.add_argument(
        "--cache-bytes", type=int, default=64 << 20, help="cache size on both servers"
    )
    return check_common_args(parser, parser.parse_args(argv))


def cases() -> list[tuple[str, Scenario]]:
    """(model, scenario) for every shape, concurrency and model, executed before cached."""
    return [
        (model, Scenario(f"{shape_name} {label}", shape, conc))
        for shape_name, shape in SHAPES.items()
        for conc in CONCURRENCY
        for model, label in ((EXECUTED, "executed"), (CACHED, "cache hit"))
    ]


def triton_cache_dir(tritonserver: str) -> Path:
    """Where scripts/triton.sh's install keeps Triton's cache libraries (local/...so)."""
    return Path(tritonserver).parent / "pytriton" / "tritonserver" / "caches"


@contextlib.contextmanager
def servers(
    opts: argparse.Namespace, tritonserver: str, facts: dict[str, object]
) -> Iterator[dict[str, ServerProcess]]:
    started: dict[str, ServerProcess] = {}
    shm_prefix = f"pbdcache{os.getpid()}"
    size = str(opts.cache_bytes)
    try:
        started["triton"] = start_triton_server(
            tritonserver, RESULTS, REPOSITORY, CACHED,
            ["--load-model", EXECUTED, f"--cache-config=local,size={size}",
             f"--cache-dir={triton_cache_dir(tritonserver)}", *opts.triton_arg],
        )  # fmt: skip
        started["pbd"] = start_pbd(
            opts.python, RESULTS, REPOSITORY, CACHED, shm_prefix,
            ["--load-model", EXECUTED, "--cache-local-size-bytes", size, *opts.pbd_arg],
            name="pbd-cache",
        )  # fmt: skip
        yield started
    finally:
        for name, server in started.items():
            ticks = {pid: procstat.start_ticks(pid) for pid in procstat.children(server.pid)}
            facts[f"{name}_exit_code"] = server.stop()
            facts[f"{name}_children_left"] = kill_leftovers(ticks)
        if "pbd" in started:
            facts["pbd_shm_left"] = leftover_segments(shm_prefix)


def cache_counts(started: dict[str, ServerProcess]) -> dict[str, tuple[int, int]]:
    """(hits, misses) of the cached model on each server."""
    counts = {}
    for name, server in started.items():
        with grpcclient.InferenceServerClient(server.target) as client:
            stats = client.get_inference_statistics(CACHED, as_json=True)["model_stats"][0]
        infer = stats["inference_stats"]
        hits, misses = (int(infer.get(k, {}).get("count", 0)) for k in ("cache_hit", "cache_miss"))
        counts[name] = (hits, misses)
    return counts


async def measure(
    opts: argparse.Namespace, started: dict[str, ServerProcess]
) -> list[tuple[str, ScenarioResult]]:
    results = []
    head = table_head(SERVERS)
    print(f"{head}\n{'-' * len(head)}", flush=True)
    for model, scenario in cases():
        result = ScenarioResult(scenario, servers=SERVERS)
        payload, data = build_request(model, scenario.shape)
        await measure_scenario(opts, started, result, payload, data)
        results.append((model, result))
        print(format_row(result), flush=True)
    return results


def speedups(results: list[tuple[str, ScenarioResult]]) -> str:
    """The Markdown table: per shape and concurrency, each server's executed and hit rates and
    the hit's speed-up; pbd's hit rate over Triton's."""
    lines = [
        "| case | in flight | Triton executed/s | Triton hit/s | Triton hit/executed "
        "| pbd executed/s | pbd hit/s | pbd hit/executed | hit pbd/Triton |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_key = {(r.scenario.shape[1], r.scenario.concurrency, m): r for m, r in results}
    for shape_name, shape in SHAPES.items():
        for conc in CONCURRENCY:
            executed, hit = by_key[(shape[1], conc, EXECUTED)], by_key[(shape[1], conc, CACHED)]
            cells = [shape_name, str(conc)]
            for server in SERVERS:
                run, cached = (
                    executed.median(server, "infer_per_s"),
                    hit.median(server, "infer_per_s"),
                )
                cells += [f"{run:.0f}", f"{cached:.0f}", f"{cached / run:.2f}"]
            cells.append(f"{hit.ratio:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    info: dict[str, object] = {**common_header(opts), "cache_bytes": opts.cache_bytes}
    facts: dict[str, object] = {}
    try:
        tritonserver = opts.tritonserver or install_triton()
        with servers(opts, tritonserver, facts) as started:
            print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
            results = asyncio.run(measure(opts, started))
            counts = cache_counts(started)
    except RuntimeError as exc:
        print(f"bench.cache: {exc}", file=sys.stderr)
        print("shutdown:", " ".join(f"{k}={v}" for k, v in facts.items()), file=sys.stderr)
        return 2
    print("cache (hits, misses) of the cached model:", counts)
    print("shutdown:", " ".join(f"{k}={v}" for k, v in facts.items()))
    print(f"\n{speedups(results)}\n")
    print(f"took {time.monotonic() - began:.0f} s")
    document = {
        "header": info,
        "cases": [{"model": m, **r.summary()} for m, r in results],
        "cache_hits_misses": counts,
        "shutdown": facts,
    }
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"wrote {opts.json}")
    # One miss per shape on each server: its first cached request (every later one hits).
    one_miss = all(misses == len(SHAPES) for _, misses in counts.values())
    clean = facts.get("pbd_exit_code") == 0 and not facts.get("pbd_children_left")
    clean = clean and not facts.get("pbd_shm_left")
    return 0 if clean and one_miss and all(r.valid for _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
