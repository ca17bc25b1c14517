"""KServe's pod for real: the Pod that KServe makes from deploy/kserve/servingruntime.yaml and
an InferenceService, run from pbd's image (scripts/build-image.sh) by ``podman kube play`` with
the pod's default 64 MiB /dev/shm and no emptyDir. The test plays the kubelet's part in
probing (pod_clients.Prober), infers with tritonclient over gRPC and HTTP from outside the
container, sends 8 requests of 16 MiB at once to a 2-instance model, and stops the pod with
``podman kube down`` (SIGTERM) while requests execute.

Everything runs in a private network namespace (the pod with ``--network host`` there): no
port of the machine's own is bound. Stand-ins for a cluster, each said where it is made:
a hostPath volume for what KServe's storage initializer downloads to /mnt/models, the image
already present (``imagePullPolicy: Never``), and no ``ports`` list for podman (see
``for_podman``).
"""

from __future__ import annotations

import copy
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pod_namespace import HERE, ROOT, Namespace

RUNTIME = ROOT / "deploy" / "kserve" / "servingruntime.yaml"
MODELS = {
    "add_sub": ROOT / "examples" / "models" / "add_sub",
    "slow_identity": HERE / "models" / "slow_identity",
}
INFERENCE_SERVICE = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: pbd-pod
spec:
  predictor:
    terminationGracePeriodSeconds: 60
    model:
      modelFormat:
        name: triton
      runtime: kserve-pbd-tritonserver
      storageUri: gs://bucket/models
"""
KSERVE_ARGS = [
    "tritonserver",
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
]
READY_TIMEOUT_S = 240


def kserve_pod(runtime: dict[str, Any], service: dict[str, Any], name: str) -> dict[str, Any]:
    """The predictor Pod KServe's controller makes (RawDeployment: no queue-proxy sidecar):
    the runtime's container as it is, named kserve-container, the model location
    (``kserve-provision-location``, filled by the storage initializer) read-only at
    /mnt/models, the runtime's annotations and volumes, the predictor's pod fields."""
    container = copy.deepcopy(runtime["spec"]["containers"][0])
    assert container["name"] == "kserve-container"
    container.setdefault("volumeMounts", []).append(
        {"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True}
    )
    predictor = service["spec"]["predictor"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "serving.kserve.io/inferenceservice": service["metadata"]["name"],
                "component": "predictor",
            },
            "annotations": dict(runtime["spec"].get("annotations", {})),
        },
        "spec": {
            "terminationGracePeriodSeconds": predictor["terminationGracePeriodSeconds"],
            "containers": [container],
            "volumes": [
                *copy.deepcopy(runtime["spec"].get("volumes", [])),
                {"name": "kserve-provision-location", "emptyDir": {}},
            ],
        },
    }


def for_podman(pod: dict[str, Any], repository: Path) -> dict[str, Any]:
    """The cluster's parts that podman has not: the storage initializer's download is a
    hostPath; the image is local; and ``ports`` goes, because podman 4.3 turns a containerPort
    into a host port mapping, which it refuses with host networking (where, as on a pod's own
    IP, every port the container binds is reachable anyway)."""
    pod = copy.deepcopy(pod)
    container = pod["spec"]["containers"][0]
    container["imagePullPolicy"] = "Never"
    container.pop("ports")
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == "kserve-provision-location":
            del volume["emptyDir"]
            volume["hostPath"] = {"path": str(repository), "type": "Directory"}
    return pod


def test_the_runtime_needs_no_dev_shm_volume() -> None:
    """The issue's point: the pod's own 64 MiB /dev/shm is enough, on a read-only root."""
    runtime = yaml.safe_load(RUNTIME.read_text())
    container = runtime["spec"]["containers"][0]
    assert container["args"] == KSERVE_ARGS
    assert "volumes" not in runtime["spec"]
    assert all(m["mountPath"] != "/dev/shm" for m in container.get("volumeMounts", []))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsUser"] == 1000


class Pod:
    def __init__(self, space: Namespace, workdir: Path) -> None:
        self.space = space
        self.name = f"pbdtest-{secrets.token_hex(3)}"
        self.container_name = f"{self.name}-kserve-container"
        repository = workdir / "models"
        repository.mkdir()
        for model, source in MODELS.items():
            shutil.copytree(source, repository / model)
        for path in [workdir, repository, *repository.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the pod's uid 1000
        runtime = yaml.safe_load(RUNTIME.read_text())
        service = yaml.safe_load(INFERENCE_SERVICE)
        self.spec = kserve_pod(runtime, service, self.name)
        self.yaml = workdir / "pod.yaml"
        self.yaml.write_text(yaml.safe_dump(for_podman(self.spec, repository)))
        self.container = self.spec["spec"]["containers"][0]
        self.pid = 0
        self.played: dict[str, Any] = {}

    def inspect(self, template: str) -> str:
        done = self.space.run("podman", "inspect", "--format", template, self.container_name)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def remove(self) -> None:
        """Remove the pod this test made, by name, whatever state it is in."""
        if self.space.run("podman", "pod", "exists", self.name).returncode == 0:
            self.space.run("podman", "pod", "rm", "--force", "--time", "0", self.name)


@pytest.fixture(scope="module")
def pod(namespace: Namespace, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    made = Pod(namespace, tmp_path_factory.mktemp("pod"))
    try:
        played = namespace.clients(
            "play",
            timeout_s=READY_TIMEOUT_S + 120,
            pod_yaml=str(made.yaml),
            container=made.container,
            ready_timeout_s=READY_TIMEOUT_S,
        )
        print("\nkube play:", played)
        made.played = played
        if played["kube_play_rc"] == 0:
            made.pid = int(made.inspect("{{.State.Pid}}"))
        yield made
    finally:
        if namespace.run("podman", "container", "exists", made.container_name).returncode == 0:
            logs = namespace.run("podman", "logs", made.container_name)
            print("\ncontainer log (tail):\n" + (logs.stdout + logs.stderr)[-4000:])
        made.remove()
    assert namespace.run("podman", "pod", "exists", made.name).returncode != 0


def test_kube_play_and_the_kubelets_probes(pod: Pod) -> None:
    played = pod.played
    assert played["kube_play_rc"] == 0, played["kube_play_stderr"]
    assert played["ready"], f"never ready: {played['readiness_probes']}"
    assert played["live"], f"the kubelet would restart it: {played['liveness_probes']}"
    # Not yet listening at the first probe is allowed: failureThreshold in a row would not be.
    assert played["readiness_probes"][-1][1] == 200
    assert pod.inspect("{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}") == "true 1000"


def test_tritonclient_grpc_and_http_from_outside(pod: Pod) -> None:
    answer = pod.space.clients("infer")
    a, b = list(range(4)), [2.0] * 4
    expected = {
        "OUTPUT0": [x + y for x, y in zip(a, b, strict=True)],
        "OUTPUT1": [x - y for x, y in zip(a, b, strict=True)],
    }
    assert answer["grpc"] == expected
    assert answer["http"] == expected
    assert answer["grpc_ready"] is True


def test_256_mib_in_flight_with_the_default_dev_shm(pod: Pod) -> None:
    """8 requests of 16 MiB at once to a 2-instance model: 128 MiB of inputs and as much of
    outputs, in a pod whose /dev/shm holds 64 MiB; pbd puts none of it there."""
    answer = pod.space.clients(
        "big", pid=pod.pid, name=pod.container_name, count=8, mib=16, delay_ms=500
    )
    print("\nbig tensors:", answer)
    assert answer["outcomes"] == ["equal"] * 8
    size_k, used_k = answer["df"].splitlines()[1].split()[1:3]
    assert int(size_k) <= 64 * 1024  # the default, not an emptyDir
    assert int(used_k) == 0
    assert answer["shm_used_max_bytes"] == 0


def test_stop_under_load_drains(pod: Pod) -> None:
    """SIGTERM, as the kubelet stops a pod: requests executing are answered, new ones refused,
    not ready but live; pbd exits 0 within the grace period; ``kube down`` removes the pod."""
    answer = pod.space.clients(
        "drain",
        pid=pod.pid,
        pod=pod.name,
        name=pod.container_name,
        pod_yaml=str(pod.yaml),
        grace_s=pod.spec["spec"]["terminationGracePeriodSeconds"],
        delay_ms=3000,
    )
    print("\ndrain:", answer)
    assert answer["in_flight"] == ["equal", "equal"]
    assert answer["ready_status"] == 400  # Triton's not ready: a failure to the kubelet
    assert answer["live_status"] == 200
    assert answer["new_request"] == (
        "StatusCode.UNAVAILABLE: GRPC server is shutting down and has stopped accepting new "
        "requests."
    )
    assert answer["pod_stop_rc"] == 0, answer["pod_stop_stderr"]
    assert answer["exit_code"].strip() == "0"  # pbd's own exit, not the grace period's SIGKILL
    assert answer["kube_down_rc"] == 0, answer["kube_down_stderr"]
    assert answer["pod_left"] is False
