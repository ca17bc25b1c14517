"""The container suite's fixtures: pbd's image (scripts/build-image.sh, built once per
session) and a private network and mount namespace for podman and the clients.

It runs as root where podman and runc are installed or apt-get can install them (CI: root on
a Debian machine with the registries reachable), and is skipped with the reason otherwise.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from pod_namespace import IMAGE, ROOT, Namespace, reachable, unavailable_reason

BUILD_TIMEOUT_S = 900


@pytest.fixture(scope="session")
def image() -> str:
    """pbd's image, built by scripts/build-image.sh: about 30 s once the base image is made,
    3 to 4 minutes the first time (mmdebstrap's download)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no podman: {reason}")
    try:
        built = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build-image.sh"), IMAGE],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/build-image.sh ran past {BUILD_TIMEOUT_S} s")
    if built.returncode != 0:
        tail = (built.stdout + built.stderr).strip().splitlines()[-15:]
        if not reachable("https://pypi.org/simple/pip/"):
            pytest.skip(f"the image build failed offline (pypi.org unreachable): {tail[-1:]}")
        pytest.fail("scripts/build-image.sh failed:\n" + "\n".join(tail))
    return IMAGE


@pytest.fixture(scope="module")
def namespace(image: str) -> Iterator[Namespace]:
    space = Namespace()
    try:
        yield space
    finally:
        space.close()
