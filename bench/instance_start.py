"""Instance start-up: the process launcher vs. systemd units, in the same run.

    python -m bench.instance_start [--rounds 7]

Both daemons run `examples/models/identity_fp32` (explicit mode) and unload/load it
``--rounds`` times over gRPC. Reported per launcher, as medians:

- ``load``: the RepositoryModelLoad call as the client sees it;
- ``instance``: the daemon's own "ready in N ms" for the instance (launch -> initialize()
  returned), from its log;
- systemd only, ``unit``: systemd's timestamps of the worker unit, from leaving "inactive"
  (the start job began) to entering "active" (READY=1 arrived, after initialize()).

The systemd daemon runs in a private systemd (tests/systemd/private_systemd.py: PID 1 of new
namespaces; needs root and unshare); without one that half is skipped with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import tritonclient.grpc as grpcclient

from bench.servers import ROOT, start_pbd

MODEL = "identity_fp32"
UNIT = "pbd-worker@identity_fp32-1-identity_fp32_0_0.service"
READY_RE = re.compile(r"ready in ([0-9.]+) ms")


def _load_module(name: str) -> ModuleType:
    path = ROOT / "tests" / "systemd" / f"{name}.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cycle(client: grpcclient.InferenceServerClient) -> float:
    client.unload_model(MODEL)
    began = time.perf_counter()
    client.load_model(MODEL)
    return (time.perf_counter() - began) * 1e3


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ms" if values else "      -"


def run_process(rounds: int, workdir: Path) -> dict[str, list[float]]:
    server = start_pbd(
        sys.executable,
        workdir,
        ROOT / "examples" / "models",
        MODEL,
        f"pbdbstart{secrets.token_hex(2)}",
        [],
    )
    try:
        client = grpcclient.InferenceServerClient(server.target)
        try:
            loads = [_cycle(client) for _ in range(rounds)]
        finally:
            client.close()
    finally:
        server.stop()
    instance = [float(m) for m in READY_RE.findall((workdir / "pbd.log").read_text())][1:]
    return {"load": loads, "instance": instance}


def run_systemd(rounds: int, workdir: Path) -> dict[str, list[float]] | str:
    private = _load_module("private_systemd")
    reason = private.unavailable_reason()
    if reason is not None:
        return reason
    units = _load_module("pbd_units")
    shared = workdir / "shared"
    (shared / "markers").mkdir(parents=True)
    shutil.copytree(ROOT / "examples" / "models" / MODEL, shared / "repository" / MODEL)
    systemd = private.PrivateSystemd(shared)
    systemd.start()
    try:
        pbd = units.PbdUnits(
            systemd,
            f"pbdbstart{secrets.token_hex(2)}",
            "model_control_mode=explicit",
            f"load_model={MODEL}",
        )
        pbd.install()
        systemd.systemctl("start", "pbd.service")
        client = pbd.client()
        loads, unit_ms = [], []
        for _ in range(rounds):
            loads.append(_cycle(client))
            shown = systemd.show(
                UNIT, "InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic"
            )
            unit_ms.append(
                (
                    int(shown["ActiveEnterTimestampMonotonic"])
                    - int(shown["InactiveExitTimestampMonotonic"])
                )
                / 1e3
            )
        pbd.close()
        log = pbd.daemon_log()
        systemd.systemctl("stop", "pbd.service")
    finally:
        systemd.stop()
    instance = [float(m) for m in READY_RE.findall(log)][1:]
    return {"load": loads, "instance": instance, "unit": unit_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instance_start")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pbd-bench-start-", dir=str(ROOT / "bench")) as tmp:
        base = Path(tmp)
        (base / "process").mkdir()
        process = run_process(args.rounds, base / "process")
        systemd = run_systemd(args.rounds, base / "systemd")
    print(f"identity_fp32, {args.rounds} unload/load rounds, medians")
    print(f"{'launcher':10} {'load RPC':>10} {'instance':>10} {'unit start->READY':>18}")
    print(f"{'process':10} {_median(process['load']):>10} {_median(process['instance']):>10}")
    if isinstance(systemd, str):
        print(f"systemd    skipped: {systemd}")
    else:
        print(
            f"{'systemd':10} {_median(systemd['load']):>10} {_median(systemd['instance']):>10} "
            f"{_median(systemd['unit']):>18}"
        )
        ratio = statistics.median(systemd["load"]) / statistics.median(process["load"])
        print(f"systemd / process, load RPC: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
