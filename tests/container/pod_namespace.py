"""The container suite's machinery: whether podman can run here, and a private network and
mount namespace for podman and the clients (tests/container/conftest.py makes the fixtures)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
IMAGE = "localhost/pbd-tritonserver:latest"
CONTAINERS_CONF = ROOT / ".image-build" / "containers.conf"

# Inside the namespace: cgroup v1 hierarchies that podman's cgroupfs manager creates a pod's
# cgroups in and that this machine leaves unmounted (net_cls, perf_event, hugetlb), mounted in
# the private mount namespace only; then the loopback interface, the only one there.
_NAMESPACE_SETUP = """
for h in net_cls,net_prio perf_event hugetlb; do
  [ -d /sys/fs/cgroup/$h ] || continue
  mountpoint -q /sys/fs/cgroup/$h || mount -t cgroup -o $h none /sys/fs/cgroup/$h || exit 1
done
ip link set lo up || exit 1
echo ready
exec sleep infinity
"""


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: podman runs the pod from root's image storage, in namespaces"
    for tool in ("unshare", "nsenter", "ip", "mountpoint"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not (shutil.which("podman") and shutil.which("runc")) and not shutil.which("apt-get"):
        return "podman or runc is not installed, and there is no apt-get to install them"
    return None


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except OSError:
        return False


class Namespace:
    """A private network and mount namespace held by a ``sleep`` (started with ``unshare``);
    commands join it with ``nsenter``. Killing the holder ends it once nothing else is in it."""

    def __init__(self) -> None:
        self.env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c"]
            + [_NAMESPACE_SETUP],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            self.holder.wait(10)
            self.holder.stdout.close()
            raise RuntimeError(f"the namespace was not made (exit {self.holder.returncode})")

    def command(self, *args: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--", *args]

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout_s, env=self.env
        )

    def clients(self, action: str, timeout_s: float = 300, **args: Any) -> dict[str, Any]:
        """Run pod_clients.py ACTION in the namespace; its JSON answer."""
        done = self.run(
            sys.executable, str(HERE / "pod_clients.py"), action, json.dumps(args),
            timeout_s=timeout_s,
        )
        assert done.returncode == 0, f"pod_clients {action} failed:\n{done.stderr[-3000:]}"
        answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return answer

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()
        assert self.holder.stdout is not None
        self.holder.stdout.close()
