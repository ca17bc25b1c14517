"""pbd against the real Triton 2.51 (python_backend): same model files, same load, same run.

    python -m bench.vs_triton [--quick] [--repeat N] [--duration S] [--only-cases TEXT]
                              [--pbd-arg=FLAG] [--triton-arg=FLAG] [--json PATH]

Triton is installed by ``scripts/triton.sh`` (run here unless ``--tritonserver`` is given). Both
servers serve ``bench/models`` with only ``identity_fp32_x2`` loaded (an FP32 identity, two
CPU instances, plain ``triton_python_backend_utils``), both bind 127.0.0.1 on free ports and
stay up for the whole run. Per case and repeat they take turns (Triton first on even repeats,
pbd first on odd ones) under bench/loadgen's closed loop; medians over ``--repeat``. The shm
case registers one input and one output system shared-memory region on both servers and the
request names them (no tensor bytes on the wire). See bench/README.md, "Against Triton".

Exit code 0 when every answer checked was right, no call failed and pbd stopped cleanly; 1
otherwise; 2 when a server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from bench import procstat
from bench.http_load import run_http_load
from bench.interpreters import interpreter_note, interpreters
from bench.loadgen import (
    LoadStats,
    ResponseMismatch,
    build_request,
    build_shm_request,
    check_shm_response,
)
from bench.report import Scenario, ScenarioResult, format_memory, format_row, table_head
from bench.run import Load, add_common_args, check_common_args, common_header, measure_scenario
from bench.servers import (
    ROOT,
    ServerProcess,
    free_port,
    kill_leftovers,
    leftover_segments,
    start_pbd,
    start_triton,
)

MODEL = "identity_fp32_x2"
BATCH_MODEL = "identity_fp32_batch"  # the same identity with dynamic_batching {}
REPOSITORY = ROOT / "bench" / "models"
RESULTS = ROOT / "bench" / "results"
SERVERS = ("triton", "pbd")  # (baseline, subject): ratios are pbd over Triton
MIB = 262144  # FP32 elements in 1 MiB
TRITON_STUB_SHM = "triton_python_backend_shm_region_"  # the python backend's own segments


@dataclass(frozen=True)
class Case:
    scenario: Scenario
    shm: bool = False  # input and output through system shared memory
    model: str = MODEL
    http: str = ""  # "json" or "binary": over HTTP/REST with tritonclient.http (bench.http_load)

    @property
    def label(self) -> str:
        return f"{self.scenario.name} c={self.scenario.concurrency}"


CASES = [
    Case(Scenario("fp32 [1,16]", [1, 16], 1)),
    Case(Scenario("fp32 [1,16]", [1, 16], 8)),
    Case(Scenario("fp32 1 MiB", [1, MIB], 1)),
    Case(Scenario("fp32 1 MiB", [1, MIB], 4)),
    Case(Scenario("fp32 16 MiB", [1, 16 * MIB], 2)),
    Case(Scenario("fp32 1 MiB shm", [1, MIB], 4), shm=True),
    Case(Scenario("fp32 [1,16] batch", [1, 16], 16), model=BATCH_MODEL),
    Case(Scenario("fp32 [1,16] http", [1, 16], 1), http="binary"),
    Case(Scenario("fp32 [1,16] http", [1, 16], 8), http="binary"),
    Case(Scenario("fp32 1 MiB http json", [1, MIB], 1), http="json"),
    Case(Scenario("fp32 1 MiB http binary", [1, MIB], 1), http="binary"),
]


def select_cases(cases: list[Case], only: list[str]) -> list[Case]:
    """The cases whose label (``fp32 1 MiB shm c=4``) contains one of ``only``; all if empty."""
    return [c for c in cases if not only or any(text in c.label for text in only)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vs_triton",
        description="pbd against Triton 2.51's python_backend, same model and load, same run",
    )
    add_common_args(parser, RESULTS / "vs_triton.json")
    add = parser.add_argument
    add(
        "--only-cases",
        action="append",
        default=[],
        metavar="TEXT",
        help="run the cases whose label contains TEXT (repeatable), e.g. 'shm', 'c=8', '16 MiB'",
    )
    add_triton_args(parser)
    opts = check_common_args(parser, parser.parse_args(argv))
    opts.cases = select_cases(CASES, opts.only_cases)
    if not opts.cases:
        parser.error(f"--only-cases {opts.only_cases} matches none of "
                     f"{[c.label for c in CASES]}")  # fmt: skip
    return opts


def add_triton_args(parser: argparse.ArgumentParser) -> None:
    """The options of every comparison with Triton (``bench.vs_triton``, ``bench.generate``,
    ``bench.cache``...): its launcher and extra flags."""
    parser.add_argument(
        "--triton-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra tritonserver flag, e.g. --triton-arg=--log-verbose=1",
    )
    parser.add_argument(
        "--tritonserver", help="Triton launcher to use (default: what scripts/triton.sh installs)"
    )


def install_triton() -> str:
    """scripts/triton.sh (installs on first use, then only checks): the launcher's path."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "triton.sh")], stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/triton.sh failed with exit code {done.returncode}")
    return done.stdout.strip().splitlines()[-1]


# --- system shared memory -------------------------------------------------------------------


class ShmPair:
    """One input region holding the request's tensor and one output region, each the tensor's
    size, created here and registered on every server in ``targets``.

    :meth:`check` is the load generator's answer check: the response must name ``OUTPUT0``
    and carry no bytes, and the output region must hold the input. It then zeroes the output
    region, so the next check (64 answers later, see bench/loadgen) sees only what was written
    after it; :meth:`reset` zeroes it before each run, so a server's first answer cannot pass
    on what the other server wrote.
    """

    def __init__(self, tag: str, shape: list[int], data: bytes, targets: list[str]) -> None:
        self.shape = shape
        self.input_name, self.output_name = f"{tag}_in", f"{tag}_out"
        self.expected = np.frombuffer(data, np.float32).reshape(shape)
        self.nbytes = len(data)
        self._registered: list[str] = []
        self._input = shm.create_shared_memory_region(
            self.input_name, f"/{self.input_name}", self.nbytes, create_only=True
        )
        self._output = None
        try:
            self._output = shm.create_shared_memory_region(
                self.output_name, f"/{self.output_name}", self.nbytes, create_only=True
            )
            shm.set_shared_memory_region(self._input, [self.expected])
            self.reset()
            for target in targets:
                with grpcclient.InferenceServerClient(target) as client:
                    self._registered.append(target)
                    for name in (self.input_name, self.output_name):
                        client.register_system_shared_memory(name, f"/{name}", self.nbytes)
        except BaseException:
            self.close()
            raise

    def request(self, model: str) -> bytes:
        return build_shm_request(model, self.shape, self.input_name, self.output_name)

    def reset(self, _server: str = "") -> None:
        shm.set_shared_memory_region(self._output, [np.zeros_like(self.expected)])

    def check(self, raw: bytes) -> None:
        check_shm_response(raw, self.shape)
        same = np.array_equal(
            shm.get_contents_as_numpy(self._output, np.float32, self.shape), self.expected
        )
        if not same:
            raise ResponseMismatch("the output region does not hold the input")
        self.reset()

    def close(self) -> None:
        for target in self._registered:
            with contextlib.suppress(Exception), grpcclient.InferenceServerClient(target) as c:
                for name in (self.input_name, self.output_name):
                    c.unregister_system_shared_memory(name)
        for region in (self._input, self._output):
            if region is not None:
                shm.destroy_shared_memory_region(region)


# --- the run --------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(
    opts: argparse.Namespace, tritonserver: str, facts: dict[str, object]
) -> Iterator[dict[str, ServerProcess]]:
    """Triton and pbd, started (Triton first); on exit each stopped by PID, children still
    alive killed by PID, and what was left over recorded in ``facts``."""
    started: dict[str, ServerProcess] = {}
    shm_prefix = f"pbdvt{os.getpid()}"
    try:
        began = time.monotonic()
        both = ["--load-model", BATCH_MODEL]
        started["triton"] = start_triton(
            tritonserver, RESULTS, REPOSITORY, MODEL, [*both, *opts.triton_arg]
        )
        facts["triton_start_s"] = round(time.monotonic() - began, 2)
        began = time.monotonic()
        http_port = free_port()
        pbd_args = ["--allow-client-shm", "true", f"--http-port={http_port}", *both,
                    *opts.pbd_arg]  # fmt: skip
        started["pbd"] = start_pbd(
            opts.python, RESULTS, REPOSITORY, MODEL, shm_prefix, pbd_args, name="pbd-vs-triton"
        )  # its log: bench/results/pbd-vs-triton.log (pbd.log is `python -m bench`'s)
        started["pbd"].http_port = http_port
        facts["pbd_start_s"] = round(time.monotonic() - began, 2)
        yield started
    finally:
        for name, server in started.items():
            kids = procstat.children(server.pid)
            ticks = {pid: procstat.start_ticks(pid) for pid in kids}
            # The stub's argv names its segment: <stub> <model.py> <segment> <size> ...
            segments = [
                procstat.command_line(pid).split()[2]
                for pid in kids
                if TRITON_STUB_SHM in procstat.command_line(pid)
            ]
            facts[f"{name}_exit_code"] = server.stop()
            facts[f"{name}_children_left"] = kill_leftovers(ticks)
            if name == "triton":
                facts["triton_shm_left"] = [s for s in segments if Path("/dev/shm", s).exists()]
        if "pbd" in started:
            facts["pbd_shm_left"] = leftover_segments(shm_prefix)


def server_versions(started: dict[str, ServerProcess]) -> dict[str, str]:
    versions = {}
    for name, server in started.items():
        with grpcclient.InferenceServerClient(server.target) as client:
            meta = client.get_server_metadata()
            versions[f"{name}_version"] = f"{meta.name} {meta.version}"
    return versions


def memory(started: dict[str, ServerProcess], key: str, label: str) -> dict[str, object]:
    """``key`` (VmRSS, VmHWM) of each server process alone and of each of its children, under
    ``<server>_<label>_kib`` and ``<server>_children_<label>_kib``."""
    out: dict[str, object] = {}
    for name, server in started.items():
        out[f"{name}_{label}_kib"] = procstat.status_kib(server.pid, key) or 0
        out[f"{name}_children_{label}_kib"] = {
            pid: procstat.status_kib(pid, key) or 0 for pid in procstat.children(server.pid)
        }
    return out


async def measure(
    opts: argparse.Namespace, started: dict[str, ServerProcess]
) -> tuple[list[ScenarioResult], str]:
    """Every selected case on both servers; the results, and the first failure ('' if none)
    that stopped the run (a wrong first answer or a failed call that raised)."""
    results: list[ScenarioResult] = []
    head = table_head(SERVERS)
    print(f"{head}\n{'-' * len(head)}", flush=True)
    for case in opts.cases:
        result = ScenarioResult(case.scenario, servers=SERVERS)
        payload, data = build_request(case.model, case.scenario.shape)
        try:
            if case.shm:
                targets = [s.target for s in started.values()]
                pair = ShmPair(f"pbdvt{os.getpid()}", case.scenario.shape, data, targets)
                try:
                    await measure_scenario(
                        opts, started, result, pair.request(MODEL), data,
                        check=pair.check, before_run=pair.reset,
                    )  # fmt: skip
                finally:
                    pair.close()
            elif case.http:
                load = http_load(opts, started, case, data)
                await measure_scenario(opts, started, result, payload, data, load=load)
            else:
                await measure_scenario(opts, started, result, payload, data)
        except RuntimeError as exc:
            return results, f"{case.label}: {exc}"
        results.append(result)
        daemon = result.cpu_us_per_infer("pbd", "main")
        print(
            format_row(result)
            + (" (system shm in+out)" if case.shm else "")
            + f" pbd daemon {daemon:.1f} µs/infer",
            flush=True,
        )
    print(TABLE_FOOT)
    return results, ""


def http_load(
    opts: argparse.Namespace, started: dict[str, ServerProcess], case: Case, data: bytes
) -> Load:
    """``case``'s load over HTTP/REST (``bench.http_load``), the same client for each server."""
    tensor = np.frombuffer(data, np.float32).reshape(case.scenario.shape)

    async def load(name: str, clocks: Mapping[str, Callable[[], float]]) -> LoadStats:
        return await asyncio.to_thread(
            run_http_load,
            f"127.0.0.1:{started[name].http_port}",
            case.model,
            tensor,
            binary=case.http == "binary",
            concurrency=case.scenario.concurrency,
            duration=opts.duration,
            warmup=opts.warmup,
            max_requests=opts.max_requests,
            clocks=clocks,
        )

    return load


TABLE_FOOT = (
    "infer/s, p50/p99 latency (ms): medians over repeats; cpu: server CPU µs per infer, the\n"
    "server process and its children (Triton's python backend stubs; pbd's workers);\n"
    "pbd/triton: throughput ratio; cpu x: pbd's CPU per infer over Triton's; the Markdown\n"
    "table and the JSON also give the median of the per-repeat ratios (paired)"
)


def markdown_table(results: list[ScenarioResult]) -> str:
    """The results as the Markdown table bench/README.md shows."""
    lines = [
        "| case | in flight | Triton/s | p50 | p99 | CPU µs | pbd/s | p50 | p99 | CPU µs "
        "| pbd/Triton | paired | CPU pbd/Triton |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        cells = [res.scenario.name, str(res.scenario.concurrency)]
        for server in res.servers:
            cells += [
                _fmt(res.median(server, "infer_per_s"), 0),
                _fmt(res.median(server, "p50_ms"), 2),
                _fmt(res.median(server, "p99_ms"), 2),
                _fmt(res.cpu_us_per_infer(server), 0),
            ]
        cells += [_fmt(res.ratio, 2), _fmt(res.paired_ratio, 2), _fmt(res.cpu_ratio, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float, digits: int) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN is not equal to itself


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    info: dict[str, object] = {
        **common_header(opts),
        "model": MODEL,
        "cases": [c.label for c in opts.cases],
        "triton_args": opts.triton_arg,
    }
    facts: dict[str, object] = {}
    results: list[ScenarioResult] = []
    failure = ""
    mem: dict[str, object] = {}
    try:
        tritonserver = opts.tritonserver or install_triton()
        info["tritonserver"] = tritonserver
        with servers(opts, tritonserver, facts) as started:
            info.update(server_versions(started))
            python_facts = interpreters(opts.python, started)
            info.update(python_facts)
            print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
            note = interpreter_note(python_facts)
            if note:
                print(note, flush=True)
            time.sleep(1.0)  # let both settle before the idle reading
            mem.update(memory(started, "VmRSS", "idle"))
            results, failure = asyncio.run(measure(opts, started))
            mem.update(memory(started, "VmHWM", "peak"))
    except RuntimeError as exc:  # a server did not start (or Triton could not be installed)
        print(f"bench.vs_triton: {exc}", file=sys.stderr)
        print("shutdown:", " ".join(f"{k}={v}" for k, v in facts.items()), file=sys.stderr)
        return 2
    if failure:
        print(f"bench.vs_triton: stopped: {failure}", file=sys.stderr)
    print("memory (idle: VmRSS once loaded; peak: VmHWM after the run; children: stubs, workers):")
    print(format_memory(mem))
    print("shutdown:", " ".join(f"{k}={v}" for k, v in facts.items()))
    print(f"\n{markdown_table(results)}\n")
    elapsed = time.monotonic() - began
    print(f"took {elapsed:.0f} s")
    document = {
        "header": info,
        "cases": [{**r.summary(), "shm": c.shm} for r, c in zip(results, opts.cases, strict=False)],
        "memory_kib": mem,
        "shutdown": facts,
        "failure": failure,
        "elapsed_s": round(elapsed, 1),
    }
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"wrote {opts.json}")
    clean = (
        facts.get("pbd_exit_code") == 0
        and not facts.get("pbd_children_left")
        and not facts.get("pbd_shm_left")
    )
    return 0 if clean and not failure and all(r.valid for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
