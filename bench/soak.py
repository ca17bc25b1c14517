"""Soak: every RPC at once against one daemon, with random worker kills, for a bounded time.

    python -m bench.soak --duration 600 [--kill-every 5] [--json soak.json]

Models (copies of examples/models/add_sub): ``steady`` (never killed), ``victim`` (2
instances; a random one of its workers gets SIGKILL every ``--kill-every`` seconds) and
``spare`` (loaded and unloaded in a loop). Traffic: ModelInfer and ModelStreamInfer on steady
and victim, metadata, config, index, statistics, load/unload, and system shared memory
(register, infer with inputs and outputs in the region, status, unregister).

An error counts as "in a killed instance" only when its message says the victim's worker was
killed by a signal; every other error is an error outside the killed instances (target: 0).
Every second it samples the RSS of the daemon and its workers and what the daemon holds in
in segments. At the end the daemon is stopped with SIGTERM; nothing of it may be left held.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.procstat import children, status_kib
from bench.servers import leftover_segments, segment_bytes, start_pbd

ROOT = Path(__file__).resolve().parents[1]
ADD_SUB = ROOT / "examples" / "models" / "add_sub"
SHM_KEY = "/pbdsoak-region"
SHM_BYTES = 64
KILLED = re.compile(r"instance '[^']+' of model 'victim' version \d+ killed by signal")


def make_repository(root: Path) -> Path:
    repository = root / "repository"
    for name, count in (("steady", 1), ("victim", 2), ("spare", 1)):
        shutil.copytree(ADD_SUB, repository / name)
        config = repository / name / "config.pbtxt"
        text = config.read_text().replace('name: "add_sub"', f'name: "{name}"')
        text += f"\ninstance_group [ {{ count: {count}, kind: KIND_CPU }} ]\n"
        config.write_text(text)
    return repository


class Soak:
    def __init__(self, target: str, daemon_pid: int, prefix: str, deadline: float) -> None:
        self.target = target
        self.daemon_pid = daemon_pid
        self.prefix = prefix
        self.deadline = deadline
        self.requests: Counter[str] = Counter()
        self.killed_errors = 0
        self.errors: list[str] = []
        self.kills = 0
        self.samples: list[dict[str, float]] = []
        self._lock = threading.Lock()

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def record(self, kind: str, call: Callable[[], object]) -> None:
        try:
            call()
        except InferenceServerException as exc:
            with self._lock:
                if KILLED.search(exc.message() or ""):
                    self.killed_errors += 1
                else:
                    self.errors.append(f"{kind}: {exc.status()} {exc.message()}")
        with self._lock:
            self.requests[kind] += 1

    # -- traffic -------------------------------------------------------------------------------

    @staticmethod
    def _inputs() -> tuple[list[grpcclient.InferInput], np.ndarray]:
        a = np.random.rand(4).astype(np.float32)
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        return inputs, a

    def infer_loop(self, model: str) -> None:
        with grpcclient.InferenceServerClient(self.target) as client:
            while self.running():

                def call() -> None:
                    inputs, a = self._inputs()
                    result = client.infer(model, inputs, client_timeout=60)
                    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a * 2)

                self.record(f"infer {model}", call)

    def stream_loop(self, model: str) -> None:
        with grpcclient.InferenceServerClient(self.target) as client:
            while self.running():
                answers: list[object] = []
                done = threading.Event()

                def callback(
                    result: object, error: object, answers: list = answers, done=done
                ) -> None:
                    answers.append(error if error is not None else result)
                    if len(answers) == 4:
                        done.set()

                client.start_stream(callback=callback)
                for _ in range(4):
                    client.async_stream_infer(model, self._inputs()[0])
                done.wait(60)
                client.stop_stream()
                for answer in answers:

                    def check(answer: object = answer) -> None:
                        if isinstance(answer, InferenceServerException):
                            raise answer

                    self.record(f"stream {model}", check)

    def control_loop(self) -> None:
        with grpcclient.InferenceServerClient(self.target) as client:
            calls: list[tuple[str, Callable[[], object]]] = [
                ("metadata", lambda: client.get_model_metadata("steady")),
                ("config", lambda: client.get_model_config("victim")),
                ("index", client.get_model_repository_index),
                ("statistics", lambda: client.get_inference_statistics("")),
                ("server", lambda: (client.is_server_live(), client.get_server_metadata())),
            ]
            while self.running():
                for kind, call in calls:
                    self.record(kind, call)
                time.sleep(0.05)

    def load_loop(self) -> None:
        with grpcclient.InferenceServerClient(self.target) as client:
            while self.running():
                self.record("load", lambda: client.load_model("spare"))
                self.record("unload", lambda: client.unload_model("spare"))

    def shm_loop(self) -> None:
        import tritonclient.utils.shared_memory as shm

        with grpcclient.InferenceServerClient(self.target) as client:
            while self.running():
                handle = shm.create_shared_memory_region("soak", SHM_KEY, SHM_BYTES)
                try:
                    a = np.random.rand(4).astype(np.float32)
                    shm.set_shared_memory_region(handle, [a, a])
                    self.record("shm register", lambda: client.register_system_shared_memory(
                        "soak", SHM_KEY, SHM_BYTES))  # fmt: skip

                    def infer(handle: object = handle, a: np.ndarray = a) -> None:
                        inputs = [
                            grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")
                        ]
                        inputs[0].set_shared_memory("soak", 16, 0)
                        inputs[1].set_shared_memory("soak", 16, 16)
                        out = grpcclient.InferRequestedOutput("OUTPUT0")
                        out.set_shared_memory("soak", 16, 32)
                        client.infer("steady", inputs, outputs=[out], client_timeout=60)
                        got = shm.get_contents_as_numpy(handle, np.float32, [4], offset=32)
                        np.testing.assert_allclose(got, a * 2)

                    self.record("shm infer", infer)
                    self.record("shm status", lambda: client.get_system_shared_memory_status())
                    self.record("shm unregister", lambda: client.unregister_system_shared_memory(
                        "soak"))  # fmt: skip
                finally:
                    shm.destroy_shared_memory_region(handle)

    def kill_loop(self, every: float) -> None:
        rng = random.Random(7)
        while self.running():
            time.sleep(every)
            victims = [pid for pid in children(self.daemon_pid) if _is_victim(pid)]
            if victims and self.running():
                os.kill(rng.choice(victims), signal.SIGKILL)
                self.kills += 1

    def sample_loop(self) -> None:
        started = time.monotonic()
        while self.running():
            workers = children(self.daemon_pid)
            self.samples.append(
                {
                    "t": round(time.monotonic() - started, 1),
                    "daemon_rss_kib": status_kib(self.daemon_pid) or 0,
                    "workers_rss_kib": sum(status_kib(p) or 0 for p in workers),
                    "workers": len(workers),
                    # The steady model's worker is never killed: its RSS shows a worker leak.
                    "steady_worker_rss_kib": sum(
                        status_kib(p) or 0 for p in workers if _is_model(p, "steady")
                    ),
                    "shm_bytes": shm_bytes(self.prefix),
                }
            )
            time.sleep(1.0)


def _is_victim(pid: int) -> bool:
    return _is_model(pid, "victim")


def _is_model(pid: int, model: str) -> bool:
    try:
        return f"{model}/".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def shm_bytes(prefix: str) -> int:
    return segment_bytes(prefix)


def run(duration: float, kill_every: float, log_dir: Path) -> dict[str, object]:
    prefix = f"pbdsoak{os.getpid()}"
    repository = make_repository(log_dir)
    server = start_pbd(
        sys.executable, log_dir, repository, "steady", prefix,
        ["--load-model", "victim", "--allow-client-shm", "true"],
    )  # fmt: skip
    soak = Soak(server.target, server.pid, prefix, time.monotonic() + duration)
    loops: list[Callable[[], None]] = [
        lambda: soak.infer_loop("steady"),
        lambda: soak.infer_loop("victim"),
        lambda: soak.infer_loop("victim"),
        lambda: soak.stream_loop("steady"),
        lambda: soak.stream_loop("victim"),
        soak.control_loop,
        soak.load_loop,
        soak.shm_loop,
        lambda: soak.kill_loop(kill_every),
        soak.sample_loop,
    ]
    threads = [threading.Thread(target=loop, daemon=True) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration + 120)
    rc = server.stop(grace=60)
    time.sleep(0.5)
    samples = soak.samples
    warm = [s for s in samples if s["t"] >= min(30.0, duration * 0.25)] or samples
    start, end = warm[0], warm[-1]

    def growth(key: str) -> float:
        return round(100.0 * (end[key] - start[key]) / max(start[key], 1), 1)

    return {
        "duration_s": duration,
        "requests": sum(soak.requests.values()),
        "requests_by_kind": dict(soak.requests),
        "kills": soak.kills,
        "errors_in_killed_instances": soak.killed_errors,
        "errors_outside_killed_instances": len(soak.errors),
        "first_errors": soak.errors[:10],
        "daemon_rss_kib": {
            "after_warmup": start["daemon_rss_kib"],
            "end": end["daemon_rss_kib"],
            "growth_pct": growth("daemon_rss_kib"),
        },  # fmt: skip
        "workers_rss_kib": {
            "after_warmup": start["workers_rss_kib"],
            "end": end["workers_rss_kib"],
            "growth_pct": growth("workers_rss_kib"),
        },  # fmt: skip
        "steady_worker_rss_kib": {
            "after_warmup": start["steady_worker_rss_kib"],
            "end": end["steady_worker_rss_kib"],
            "growth_pct": growth("steady_worker_rss_kib"),
        },  # fmt: skip
        "shm_bytes_max": max((s["shm_bytes"] for s in samples), default=0),
        "shm_left_after_stop": leftover_segments(prefix),
        "daemon_exit_code": rc,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    parser.add_argument("--kill-every", type=float, default=5.0, help="seconds between kills")
    parser.add_argument("--json", type=Path, help="write the full report (with samples) here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pbd-soak-") as tmp:
        report = run(args.duration, args.kill_every, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    summary = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    ok = (
        report["errors_outside_killed_instances"] == 0
        and not report["shm_left_after_stop"]
        and report["daemon_exit_code"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
