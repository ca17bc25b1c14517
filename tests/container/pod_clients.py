"""What runs beside the pod, inside the test's private network and mount namespaces (the test
starts it with ``nsenter``): ``podman kube play``/``kube down``, the kubelet's probes and the
tritonclient clients. Each action prints one JSON object of what it saw; the test asserts.

    pod_clients.py ACTION '<json arguments>'

The pod runs with ``--network host`` in that namespace, so its ports are this namespace's
127.0.0.1 and nothing is bound on the machine's own interfaces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

GRPC = "127.0.0.1:9000"
HTTP = "127.0.0.1:8080"
MIB = 1024 * 1024


def http_status(port: int, path: str, timeout_s: float = 1.0) -> int:
    """The status of a GET, as the kubelet's HTTP probe makes it; 0 when nothing answered."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


class Prober:
    """One container probe run as the kubelet runs it: an HTTP GET every ``periodSeconds``
    after ``initialDelaySeconds``, timing out after ``timeoutSeconds``; 200-399 succeeds. The
    result flips after ``successThreshold`` successes or ``failureThreshold`` failures in a
    row (readiness starts false, liveness true)."""

    def __init__(self, spec: dict[str, Any], initially: bool) -> None:
        get = spec["httpGet"]
        self.path, self.port = str(get["path"]), int(get["port"])
        self.delay = float(spec.get("initialDelaySeconds", 0))
        self.period = float(spec.get("periodSeconds", 10))
        self.timeout = float(spec.get("timeoutSeconds", 1))
        self.successes_needed = int(spec.get("successThreshold", 1))
        self.failures_allowed = int(spec.get("failureThreshold", 3))
        self.result = initially
        self.run = 0  # consecutive results opposite to ``result``
        self.seen: list[tuple[float, int]] = []

    def due(self, since: float) -> float:
        return since + self.delay + self.period * len(self.seen)

    def probe(self, at: float) -> None:
        status = http_status(self.port, self.path, self.timeout)
        self.seen.append((round(at, 2), status))
        ok = 200 <= status < 400
        if ok == self.result:
            self.run = 0
            return
        self.run += 1
        if self.run >= (self.successes_needed if ok else self.failures_allowed):
            self.result, self.run = ok, 0


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300)


def play(args: dict[str, Any]) -> dict[str, Any]:
    """``podman kube play`` the pod, then probe it as the kubelet would until it is ready."""
    container = args["container"]
    began = time.monotonic()
    played = podman("kube", "play", "--network", "host", args["pod_yaml"])
    started = time.monotonic()
    out: dict[str, Any] = {"kube_play_rc": played.returncode, "kube_play_stderr": played.stderr}
    out["kube_play_s"] = round(started - began, 2)
    if played.returncode != 0:
        return out
    readiness = Prober(container["readinessProbe"], initially=False)
    liveness = Prober(container["livenessProbe"], initially=True)
    first_ready: list[float] = []

    def watch() -> None:  # the precise moment, besides the kubelet's view of it
        while not first_ready and time.monotonic() - started < args["ready_timeout_s"]:
            if http_status(readiness.port, readiness.path) == 200:
                first_ready.append(time.monotonic() - began)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    while time.monotonic() - started < args["ready_timeout_s"] and not readiness.result:
        probe = min((readiness, liveness), key=lambda p: p.due(started))
        time.sleep(max(0.0, probe.due(started) - time.monotonic()))
        probe.probe(time.monotonic() - started)
        if not liveness.result:
            break  # the kubelet would kill and restart the container here
    watcher.join()
    out.update(
        ready=readiness.result,
        live=liveness.result,
        readiness_probes=readiness.seen,
        liveness_probes=liveness.seen,
        ready_after_s=round(first_ready[0], 2) if first_ready else None,
        kubelet_ready_after_s=round(readiness.seen[-1][0] + started - began, 2),
    )
    return out


def infer(args: dict[str, Any]) -> dict[str, Any]:
    """add_sub over gRPC and over HTTP, with tritonclient."""
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 2.0, dtype=np.float32)
    out: dict[str, Any] = {}
    grpc = grpcclient.InferenceServerClient(GRPC)
    try:
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = grpc.infer("add_sub", inputs)
        out["grpc"] = {k: result.as_numpy(k).tolist() for k in ("OUTPUT0", "OUTPUT1")}
        out["grpc_ready"] = grpc.is_server_ready()
    finally:
        grpc.close()
    http = httpclient.InferenceServerClient(HTTP)
    try:
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = http.infer("add_sub", inputs)
        out["http"] = {k: result.as_numpy(k).tolist() for k in ("OUTPUT0", "OUTPUT1")}
    finally:
        http.close()
    return out


def _shm_used(pid: int) -> int:
    """Bytes used in the container's /dev/shm, seen through its root in /proc."""
    fs = os.statvfs(f"/proc/{pid}/root/dev/shm")
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def _slow_identity(
    client: grpcclient.InferenceServerClient, data: np.ndarray, delay_ms: int, marker: str = ""
) -> np.ndarray:
    inputs = [grpcclient.InferInput("INPUT0", list(data.shape), "FP32")]
    inputs[0].set_data_from_numpy(data)
    delay = grpcclient.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([delay_ms], np.int32))
    inputs.append(delay)
    if marker:
        name = grpcclient.InferInput("MARKER", [1], "BYTES")
        name.set_data_from_numpy(np.array([marker.encode()], np.object_))
        inputs.append(name)
    return client.infer("slow_identity", inputs, client_timeout=120).as_numpy("OUTPUT0")


def _outcome(call: Callable[[], np.ndarray], expected: np.ndarray) -> str:
    try:
        answer = call()
    except InferenceServerException as error:
        return f"{error.status()}: {error.message()}"
    return "equal" if np.array_equal(answer, expected) else "different"


def big(args: dict[str, Any]) -> dict[str, Any]:
    """``count`` requests of ``mib`` MiB each, all sent at once to the 2-instance model, while
    the container's /dev/shm is sampled."""
    count, size = args["count"], args["mib"] * MIB // 4
    datas = [np.full(size, i + 0.5, dtype=np.float32) for i in range(count)]
    client = grpcclient.InferenceServerClient(GRPC)
    used: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            used.append(_shm_used(args["pid"]))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(count) as pool:
            futures = [
                pool.submit(
                    _outcome, lambda d=d: _slow_identity(client, d, args["delay_ms"]), d
                )
                for d in datas
            ]
            outcomes = [f.result() for f in futures]
    finally:
        done.set()
        sampler.join()
        client.close()
    df = podman("exec", args["name"], "df", "-k", "/dev/shm")
    return {
        "outcomes": outcomes,
        "seconds": round(time.monotonic() - began, 2),
        "shm_used_max_bytes": max(used),
        "shm_samples": len(used),
        "df": df.stdout.strip(),
    }


def drain(args: dict[str, Any]) -> dict[str, Any]:
    """The pod stopped (SIGTERM) while two requests execute, then ``podman kube down``: what
    each side sees."""
    pid, pod_yaml = args["pid"], args["pod_yaml"]
    data = np.arange(MIB, dtype=np.float32)
    markers = [f"/dev/shm/pbdtest-executing-{i}" for i in range(2)]
    outcomes: dict[int, str] = {}

    def slow(i: int) -> None:
        client = grpcclient.InferenceServerClient(GRPC)
        try:
            outcomes[i] = _outcome(
                lambda: _slow_identity(client, data, args["delay_ms"], markers[i]), data
            )
        finally:
            client.close()

    threads = [threading.Thread(target=slow, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    root = Path(f"/proc/{pid}/root")
    while not all((root / m.lstrip("/")).exists() for m in markers):
        if time.monotonic() > deadline:
            return {"error": "the requests never reached the model"}
        time.sleep(0.05)
    out: dict[str, Any] = {}
    began = time.monotonic()
    # The kubelet's stop: SIGTERM, SIGKILL after terminationGracePeriodSeconds. `podman kube
    # down` before 5.1 kills at once (podman#22397) and `kube play` before 4.7 ignores the grace
    # period (podman#19914): stop the pod with the grace period first, then take it down.
    down = subprocess.Popen(
        ["podman", "pod", "stop", "--time", str(args["grace_s"]), args["pod"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while http_status(8080, "/v2/health/ready") == 200 and time.monotonic() - began < 10:
        time.sleep(0.05)
    out["not_ready_after_s"] = round(time.monotonic() - began, 2)
    out["ready_status"] = http_status(8080, "/v2/health/ready")
    out["live_status"] = http_status(8080, "/v2/health/live")
    fresh = grpcclient.InferenceServerClient(GRPC)
    try:
        out["new_request"] = _outcome(lambda: _slow_identity(fresh, data, 0), data)
    finally:
        fresh.close()
    for thread in threads:
        thread.join(60)
    out["in_flight"] = [outcomes.get(i, "no answer") for i in range(2)]
    out["in_flight_answered_after_s"] = round(time.monotonic() - began, 2)
    _, stderr = down.communicate(timeout=args["grace_s"] + 60)
    out["pod_stop_rc"], out["pod_stop_stderr"] = down.returncode, stderr
    out["stopped_after_s"] = round(time.monotonic() - began, 2)
    out["exit_code"] = podman("inspect", "--format", "{{.State.ExitCode}}", args["name"]).stdout
    logged = podman("logs", args["name"])
    out["log_tail"] = (logged.stdout + logged.stderr).strip().splitlines()[-12:]
    taken = podman("kube", "down", pod_yaml)
    out["kube_down_rc"], out["kube_down_stderr"] = taken.returncode, taken.stderr
    out["pod_left"] = podman("pod", "exists", args["pod"]).returncode == 0
    return out


ACTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "play": play,
    "infer": infer,
    "big": big,
    "drain": drain,
}

if __name__ == "__main__":
    print(json.dumps(ACTIONS[sys.argv[1]](json.loads(sys.argv[2]))))
