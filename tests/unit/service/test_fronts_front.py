"""pbd.fronts.front: a front-end process, started as the daemon starts one."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from pbd.fronts.front import SPEC_ENV, FrontSpec
from pbd.fronts.inflight import create_memfd as create_inflight_memfd
from pbd.fronts.loads import create_memfd
from pbd.settings import Settings


def test_a_front_end_whose_daemon_is_gone_at_start_exits_with_one_line(tmp_path: Path) -> None:
    """The daemon exited (a port it could not bind) before its front end linked: the front end
    says so in one line and exits 1, no traceback."""
    loads, inflight = create_memfd(1), create_inflight_memfd(1)
    name = f"pbd-test-gone-{secrets.token_hex(8)}"  # an abstract socket nobody listens on
    spec = FrontSpec(
        index=0,
        token="t",
        link=f"@{name}",
        arena_base=f"{name}-a",
        segments_prefix=f"{name}-",
        http_socket=str(tmp_path / "http.sock"),
        grpc_fds=[],
        http_fds=[],
        loads_fd=loads,
        inflight_fd=inflight,
        fronts=1,
        settings=Settings(shm_dir=tmp_path).to_json(),
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pbd.fronts.front"],
            env={**os.environ, SPEC_ENV: spec.to_env()},
            pass_fds=[loads, inflight],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(loads)
        os.close(inflight)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert len(output.splitlines()) == 1, output
    assert "front end 0: the daemon is gone (Connection refused); exiting" in output
    assert list(tmp_path.iterdir()) == []  # no arena left behind
