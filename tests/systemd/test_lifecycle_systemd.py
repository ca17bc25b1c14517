"""The edges of pbd's life under a real (private) systemd: a storm of restarts, a stop while
start-up waits on a hung initialize(), a restart after models were added (issue #31).

Like test_systemd.py, each test boots its own systemd (private_systemd.py) and drives pbd with
systemctl and tritonclient; the finalizer kills that PID 1, pass or fail.
"""

from __future__ import annotations

import time

import pytest
from conftest import INTEGRATION_MODELS, MODELS, make_repository, shm_prefix
from pbd_units import PbdUnits, wait_until
from private_systemd import PrivateSystemd

EXIT_TIMEOUT_S = 3.0
# docs/systemd.md: a stop at any point of start-up is done within --exit-timeout-secs plus
# 15 s. systemd's own limit (TimeoutStopSec of pbd.service) is 2 min.
STOP_BOUND_S = EXIT_TIMEOUT_S + 15.0
HUNG_UNIT = "pbd-worker@init_hang-1-init_hang_0_0.service"


def _journal(systemd: PrivateSystemd) -> str:
    """pbd's and its workers' journal with timestamps, for a failure's message."""
    return systemd.journal("-u", "pbd*", "-o", "short-monotonic")[-20000:]


@pytest.mark.parametrize("hold", ["hold", "ignore SIGTERM"])
def test_stop_while_start_waits_on_a_hung_initialize(
    private_systemd: PrivateSystemd, hold: str
) -> None:
    systemd = private_systemd
    repository = make_repository(
        systemd.shared,
        {
            "counted": MODELS / "counted",
            "init_hang": MODELS / "init_hang",
            "sleepy": INTEGRATION_MODELS / "sleepy",
        },
    )
    (repository / "init_hang" / "hold_initialize").write_text(f"{hold}\n")
    pbd = PbdUnits(systemd, shm_prefix(), f"exit_timeout_secs={EXIT_TIMEOUT_S:g}")
    try:
        pbd.install()
        systemd.systemctl("start", "--no-block", "pbd.service")
        wait_until(
            lambda: (
                systemd.show(HUNG_UNIT, "ActiveState")["ActiveState"] == "activating"
                and len(pbd.worker_units("active")) == 2
            ),
            60,
            "the other instances ready and init_hang in initialize()",
        )
        assert systemd.show("pbd.service", "ActiveState")["ActiveState"] == "activating"
        began = time.monotonic()
        systemd.systemctl("stop", "pbd.service")
        took = time.monotonic() - began
        assert took < STOP_BOUND_S, (took, _journal(systemd))
        shown = systemd.show("pbd.service", "ActiveState", "Result")
        assert shown == {"ActiveState": "inactive", "Result": "success"}, _journal(systemd)
        left = pbd.worker_units("active,activating,deactivating,failed,reloading")
        assert left == [], _journal(systemd)
        assert pbd.shm_segments() == []
        log = pbd.daemon_log()
        assert "stopping the instances of init_hang: still loading after 3s" in log, log
        if hold == "ignore SIGTERM":
            assert f"{HUNG_UNIT} did not stop in 5s; killing it (SIGKILL)" in log, log
    finally:
        pbd.close()
